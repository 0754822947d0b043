"""The broker's metadata log: a private file of keyed records (SCRAM credentials, ACLs)
that no Kafka request can reach.

Kafka keeps credentials and ACLs in its KRaft metadata log, never in a topic. This is the
one-broker equivalent: ``DATA_DIR/__metadata/records.log``, beside the topics but not one
of them (the log manager never loads it, so Metadata cannot list it and no handler can
name it: a request path added later cannot reach it either).

A record is ``(kind, key, value)``: ``kind`` names the owner (``scram``, ``acl``),
``key`` identifies the item within it, ``value`` is a JSON value, or None to remove the
key. On disk each record is a frame ``size:uint32 | crc32c(payload):uint32 | payload``
with a JSON payload ``{"kind": ..., "key": ..., "value": ...}``.

Contracts:

- ``append`` writes its records in one ``write`` and fsyncs before returning: a change is
  durable before it applies. Blocking (small writes; admin requests only).
- Opening recovers as Kafka recovers a segment's tail: the first frame that is torn,
  oversized, fails its CRC or is not a record ends the log; the file is truncated there
  (an error is logged naming the byte position).
- Records are not trusted: ``replay`` hands each to its owner, which validates it and
  says whether it applied; a refused record is never kept in the compacted state.
- Compaction rewrites the file (temp file, fsync, rename, fsync of the directory) with
  the latest accepted record of each key, when the file holds more than twice as many
  records as live keys (and at least ``COMPACT_MIN_RECORDS``).

Not thread-safe: the broker's event loop only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

from headrace.storage.errors import StorageError

log = logging.getLogger(__name__)

METADATA_DIR = "__metadata"
RECORDS_FILE = "records.log"
MAX_RECORD_BYTES = 1024 * 1024
COMPACT_MIN_RECORDS = 64
_HEADER = struct.Struct(">II")


class MetadataLogError(StorageError):
    """The metadata log could not be written."""


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One change: ``value`` None removes ``key`` of ``kind``. ``position``: the byte
    offset of its frame in the file (-1 before it is written), for error messages."""

    kind: str
    key: str
    value: Any
    position: int = -1

    def describe(self) -> str:
        return f"{self.kind} record {self.key!r} at byte {self.position}"


def encode_frame(record: MetadataRecord) -> bytes:
    payload = json.dumps({"kind": record.kind, "key": record.key, "value": record.value},
                         sort_keys=True, separators=(",", ":")).encode()
    if len(payload) > MAX_RECORD_BYTES:
        raise MetadataLogError(f"metadata record of {len(payload)} bytes exceeds "
                               f"{MAX_RECORD_BYTES}")
    return _HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload


def decode_frames(data: bytes) -> tuple[list[MetadataRecord], int, str | None]:
    """The records of ``data`` up to the first bad frame: ``(records, valid_bytes,
    why_it_stopped)`` (None when the whole of ``data`` was valid). Never raises."""
    records: list[MetadataRecord] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < _HEADER.size:
            return records, pos, f"torn frame header at byte {pos}"
        size, crc = _HEADER.unpack_from(data, pos)
        if size > MAX_RECORD_BYTES:
            return records, pos, f"frame of {size} bytes at byte {pos}"
        payload = data[pos + _HEADER.size : pos + _HEADER.size + size]
        if len(payload) < size:
            return records, pos, f"torn frame at byte {pos}"
        if crc32c.crc32c(payload) != crc:
            return records, pos, f"CRC mismatch in the frame at byte {pos}"
        try:
            doc = json.loads(payload)
            kind, key, value = doc["kind"], doc["key"], doc["value"]
        except (ValueError, KeyError, TypeError):
            return records, pos, f"undecodable record at byte {pos}"
        if not isinstance(kind, str) or not isinstance(key, str):
            return records, pos, f"record without a string kind and key at byte {pos}"
        records.append(MetadataRecord(kind, key, value, pos))
        pos += _HEADER.size + size
    return records, pos, None


class MetadataLog:
    """The records of ``DATA_DIR/__metadata/records.log``, read once at open."""

    def __init__(self, data_dir: Path) -> None:
        self.directory = data_dir / METADATA_DIR
        self.path = self.directory / RECORDS_FILE
        self.directory.mkdir(parents=True, exist_ok=True)
        self._tmp().unlink(missing_ok=True)  # a compaction a crash interrupted
        data = self.path.read_bytes() if self.path.exists() else b""
        self._pending, valid, why = decode_frames(data)
        if why is not None:
            log.error("metadata log %s: %s; truncating to the %d valid bytes before it",
                      self.path, why, valid)
            with open(self.path, "r+b") as f:
                f.truncate(valid)
                os.fsync(f.fileno())
        self._size = valid
        self._records = len(self._pending)
        # Latest accepted record of each (kind, key): what compaction keeps.
        self._live: dict[tuple[str, str], MetadataRecord] = {}

    @property
    def exists(self) -> bool:
        """Whether the file exists: False only before a broker's first start with the
        metadata log (``initialize`` creates it)."""
        return self.path.exists()

    def initialize(self, records: Iterable[MetadataRecord]) -> None:
        """Create the file holding ``records``, atomically (temp file, fsync, rename): a
        crash leaves either no file or all of them. Call once, when ``exists`` is False,
        before ``replay`` (which then sees them)."""
        if self.exists:
            raise MetadataLogError(f"{self.path} exists already")
        self._pending, self._size = self._rewrite(list(records))
        self._records = len(self._pending)

    def _rewrite(self, records: list[MetadataRecord]) -> tuple[list[MetadataRecord], int]:
        """Replace the file's content with ``records`` atomically; returns them with their
        positions, and the file's size. Raises ``OSError``."""
        placed, frames, pos = [], [], 0
        for r in records:
            frame = encode_frame(r)
            placed.append(MetadataRecord(r.kind, r.key, r.value, pos))
            frames.append(frame)
            pos += len(frame)
        tmp = self._tmp()
        with open(tmp, "wb") as f:
            f.write(b"".join(frames))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.directory)
        return placed, pos

    def _tmp(self) -> Path:
        return self.path.with_suffix(".tmp")

    def replay(self, kind: str, apply: Callable[[MetadataRecord], bool]) -> None:
        """``apply(record)`` for each record of ``kind`` read at open, oldest first; it
        returns whether the record was valid and applied (a refused one is dropped, and
        must be logged by ``apply``). Call once per kind, before ``finish_replay``."""
        for record in self._pending:
            if record.kind == kind and apply(record):
                self._keep(record)

    def finish_replay(self) -> None:
        """Forget what was read at open (records of kinds nobody replayed are dropped at
        the next compaction) and compact if due."""
        self._pending = []
        self._maybe_compact()

    def append(self, records: Iterable[MetadataRecord]) -> None:
        """Write ``records`` durably (one write, fsync), then keep them. Raises
        ``MetadataLogError`` (nothing kept) when the write fails."""
        batch = list(records)
        if not batch:
            return
        frames = [encode_frame(r) for r in batch]
        try:
            with open(self.path, "ab") as f:
                f.write(b"".join(frames))
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            # Cut a partial write off now, so a later append does not land behind it (a
            # cut that fails too leaves a torn tail the next open truncates).
            with contextlib.suppress(OSError):
                os.truncate(self.path, self._size)
            raise MetadataLogError(f"cannot write the metadata log {self.path}: {e}") from e
        pos = self._size
        for record, frame in zip(batch, frames, strict=True):
            self._keep(MetadataRecord(record.kind, record.key, record.value, pos))
            pos += len(frame)
        self._size = pos
        self._records += len(batch)
        self._maybe_compact()

    def _keep(self, record: MetadataRecord) -> None:
        if record.value is None:
            self._live.pop((record.kind, record.key), None)
        else:
            self._live[(record.kind, record.key)] = record

    def _maybe_compact(self) -> None:
        if self._records >= COMPACT_MIN_RECORDS and self._records > 2 * len(self._live):
            self.compact()

    def compact(self) -> None:
        """Rewrite the file with the live records only. Crash-safe: the rename is atomic,
        and a leftover temp file is removed at the next open."""
        try:
            placed, size = self._rewrite(list(self._live.values()))
        except OSError as e:
            log.error("metadata log %s: compaction failed (the log is unchanged): %s",
                      self.path, e)
            return
        log.info("metadata log compacted: %d records -> %d", self._records, len(placed))
        self._live = {(r.kind, r.key): r for r in placed}
        self._size, self._records = size, len(placed)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
