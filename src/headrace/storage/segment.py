"""One segment of a partition log: ``<base>.log`` plus its ``.index`` and ``.timeindex``.

The log file holds producer batches verbatim, each with its assigned base offset. All
writes are appends at ``size``; reads are ``pread`` byte ranges. Not thread-safe: the
broker calls it from one event loop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from headrace.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    magic_at,
    parse_header,
    scan_batches,
)
from headrace.storage.index import OffsetIndex, TimeIndex

SCAN_CHUNK = 4 * 1024 * 1024
# Index entries hold offsets relative to the segment's base; a segment rolls before any
# offset would fall outside this (as Kafka does, Int.MaxValue).
MAX_RELATIVE_OFFSET = 0x7FFFFFFF
HEADER_WINDOW = 64 * 1024


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")


def segment_paths(directory: Path, base_offset: int, suffix: str = "") -> tuple[Path, Path, Path]:
    """The log, offset-index and time-index files of a segment."""
    name = segment_name(base_offset)
    log, index, timeindex = (directory / f"{name}{ext}{suffix}" for ext in SEGMENT_SUFFIXES)
    return log, index, timeindex


def read_batches(fd: int, start: int, end: int,
                 chunk_size: int = SCAN_CHUNK) -> Iterator[tuple[int, BatchHeader, bytes]]:
    """``(position, header, bytes)`` of each batch of the file ``fd`` in ``[start, end)``,
    read ``chunk_size`` at a time (a larger batch comes whole), CRCs not checked. Stops
    at anything that is not a whole v2 batch. For readers holding their own descriptor
    (the cleaner), so it never touches a ``Segment``."""
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(max(chunk_size, HEADER_SIZE), end - pos), pos)
        consumed = 0
        for rel, header in scan_batches(chunk, check_crc=False):
            yield pos + rel, header, chunk[rel : rel + header.size]
            consumed = rel + header.size
        if consumed == 0:
            if len(chunk) < HEADER_SIZE or magic_at(chunk) != 2:
                return
            header = parse_header(chunk)
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
                return
            whole = os.pread(fd, header.size, pos)
            if len(whole) < header.size:
                return
            yield pos, header, whole
            consumed = header.size
        pos += consumed


class Segment:
    """A log segment. ``next_offset`` is one past the last offset stored in it."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int,
                 suffix: str = "") -> None:
        """Open (or create) the segment's files; ``suffix`` names a segment being written
        beside the live ones (the cleaner's ``.cleaned`` files)."""
        self.base_offset = base_offset
        self.paths = segment_paths(directory, base_offset, suffix)
        self.path = self.paths[0]
        self._index_interval = index_interval_bytes
        existed = self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(self.paths[1])
        self.time_index = TimeIndex(self.paths[2])
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_ms = int(time.time() * 1000)
        if existed:
            self.created_ms = int(os.fstat(self._fd).st_mtime * 1000)
        self._bytes_since_index = 0

    # --- recovery ---------------------------------------------------------------------

    def recover(self, full: bool) -> int:
        """Establish ``next_offset``/``max_timestamp`` from the file; returns bytes truncated.

        ``full``: validate every batch's CRC from the start, truncate at the first torn,
        corrupt or out-of-sequence batch, and rebuild both indexes. Otherwise trust the
        file up to the last offset-index entry and scan headers from there (clean
        shutdown); if that scan does not end exactly at the end of the file, or an index
        is missing, the index is not trusted and a full recovery runs instead. Never
        raises on bad data.
        """
        if not full and not self._indexes_suspect():
            self.max_timestamp = self.time_index.max_timestamp()
            if self._scan(self.offset_index.lookup(MAX_RELATIVE_OFFSET), rebuild=False) == self.size:
                return 0
        self.offset_index.truncate(0)
        self.time_index.truncate(0)
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        valid_end = self._scan(0, rebuild=True)
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self._fd, valid_end)
            self.size = valid_end
        return truncated

    def _scan(self, start: int, rebuild: bool) -> int:
        """Walk the batches from ``start`` (CRC-checked when rebuilding, indexing them);
        returns where the valid sequence ends. A batch whose offsets go backwards or leave
        this segment's relative range ends the sequence like a corrupt one."""
        valid_end = start
        self._bytes_since_index = self._index_interval  # index the first batch seen
        for pos, header in self.iter_batches(start, check_crc=rebuild):
            if (header.base_offset < self.next_offset
                    or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET):
                break
            if rebuild:
                self._index(pos, header)
            else:
                self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
            self.next_offset = header.last_offset + 1
            valid_end = pos + header.size
        return valid_end

    def _indexes_suspect(self) -> bool:
        last = self.offset_index.last()
        return self.size > 0 and (
            last is None or last[1] >= self.size or self.time_index.entries == 0)

    def iter_batches(
        self, start: int = 0, check_crc: bool = False, chunk_size: int = SCAN_CHUNK
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` of each valid batch from ``start``, stopping at the
        first invalid or incomplete one. Reads in chunks; memory bounded by the largest batch.
        """
        pos = start
        while pos < self.size:
            chunk = os.pread(self._fd, max(chunk_size, HEADER_SIZE), pos)
            consumed = 0
            for rel, header in scan_batches(chunk, check_crc=check_crc):
                yield pos + rel, header
                consumed = rel + header.size
            if consumed == 0:
                # One batch larger than the chunk: read exactly it, or stop at a torn tail.
                big = self._read_one_large(pos, check_crc)
                if big is None:
                    return
                yield pos, big
                consumed = big.size
            pos += consumed

    def _read_one_large(self, pos: int, check_crc: bool) -> BatchHeader | None:
        head = os.pread(self._fd, HEADER_SIZE, pos)
        if len(head) < HEADER_SIZE or magic_at(head) != 2:
            return None
        header = parse_header(head)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > self.size:
            return None
        whole = os.pread(self._fd, header.size, pos)
        for _, h in scan_batches(whole, check_crc=check_crc):
            return h
        return None

    # --- append -------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        """Append whole batches (offsets already assigned) and index them.

        Blocking only as long as a page-cache write; durability comes from ``flush``.
        """
        pos = self.size
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self._fd, view[written:], pos + written)
        for header in headers:
            self._index(pos, header)
            pos += header.size
        self.size = pos

    def _index(self, pos: int, header: BatchHeader) -> None:
        relative = header.base_offset - self.base_offset
        if self._bytes_since_index >= self._index_interval:
            self.offset_index.append(relative, pos)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        if header.max_timestamp > self.max_timestamp:
            self.time_index.append(header.max_timestamp, relative)
            self.max_timestamp = header.max_timestamp
        self.next_offset = header.last_offset + 1

    # --- read ---------------------------------------------------------------------------

    def position_for(self, offset: int) -> int:
        """A batch boundary at or before the batch holding ``offset`` (from the index)."""
        return self.offset_index.lookup(offset - self.base_offset)

    def walk_headers(self, start: int, stop: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` of the batches starting in ``[start, stop)``, reading
        only headers (64 KiB windows), without checking CRCs. ``start`` must be a batch
        boundary. Stops at the end of the segment or at anything that is not a v2 header.
        """
        end = self.size if stop is None else min(stop, self.size)
        window = b""
        window_start = start
        pos = start
        while pos < end:
            if pos + HEADER_SIZE > window_start + len(window):
                window_start = pos
                window = os.pread(self._fd, HEADER_WINDOW, pos)
                if len(window) < HEADER_SIZE:
                    return
            rel = pos - window_start
            if magic_at(window, rel) != 2:
                return
            header = parse_header(window, rel)
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return
            yield pos, header
            pos += header.size

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset``, or None past the end."""
        for pos, header in self.walk_headers(self.position_for(offset)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def last_boundary(self, start: int, limit: int) -> int:
        """The largest batch end <= ``limit`` reachable from the boundary ``start`` (which
        it returns when even the first batch ends past ``limit``). Uses the offset index to
        skip ahead, so it reads O(index interval) bytes of headers, not the whole range."""
        limit = min(limit, self.size)
        # Index entries sit on batch starts, so everything in [start, begin) is whole batches.
        boundary = begin = max(start, self.offset_index.floor_position(limit))
        for pos, header in self.walk_headers(begin, limit):
            if pos + header.size > limit:
                break
            boundary = pos + header.size
        return boundary

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def fileno(self) -> int:
        return self._fd

    def flush(self, data_only: bool = False) -> None:
        """fsync the log file and, unless ``data_only``, its indexes. Blocking; call off
        the event loop. The active segment's indexes need no fsync for durability: an
        unclean start rebuilds them from the log."""
        if data_only:
            os.fdatasync(self._fd)
            return
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        """Close the files (idempotent). Readers holding a duplicate descriptor (a
        ``FileRegion``) keep reading the data, even after the files are deleted."""
        if self._fd < 0:
            return
        os.close(self._fd)
        self._fd = -1
        self.offset_index.close()
        self.time_index.close()

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def delete(self) -> None:
        self.close()
        for path in self.paths:
            path.unlink(missing_ok=True)
