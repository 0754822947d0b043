"""A partition's log: an ordered list of segments with one active segment at the end.

Offsets: ``log_start_offset`` is the first offset still stored; ``log_end_offset`` is the
offset the next record will get. On one broker the high watermark equals the log end
offset once an append returns. Not thread-safe; driven from the broker's event loop,
except ``flush`` which may run on a worker thread while appends continue.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from headrace.protocol.errors import ProtocolError
from headrace.protocol.records import (
    BatchHeader,
    build_control_batch,
    control_marker,
    parse_header,
    record_timestamps,
    rewrite_base_offset,
)
from headrace.storage.config import LogConfig
from headrace.storage.errors import (
    OffsetOutOfRangeError,
    PolicyViolationError,
    RemoteReadRequiredError,
)
from headrace.storage.producer_state import ProducerStateManager
from headrace.storage.remote_metadata import RemoteLogMetadata
from headrace.storage.results import AppendResult, FileRegion, ReadResult, RegionResult
from headrace.storage.segment import MAX_RELATIVE_OFFSET, Segment
from headrace.storage.swap import (
    commit_manifest,
    complete_interrupted_swaps,
    finish_swap,
    fsync_dir,
)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
# Written by DeleteRecords: the log start offset when it lies above the first segment's base.
LOG_START_FILE = "log-start-offset"

logger = logging.getLogger(__name__)


class PartitionLog:
    """The log of one topic partition, stored in ``directory``."""

    def __init__(self, directory: Path, config: LogConfig, recover_fully: bool) -> None:
        self.directory = directory
        self.config = config
        directory.mkdir(parents=True, exist_ok=True)
        self.swaps_completed = complete_interrupted_swaps(directory)
        bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
        self.segments: list[Segment] = [
            Segment(directory, b, config.index_interval_bytes) for b in bases
        ]
        if not self.segments:
            self.segments.append(Segment(directory, 0, config.index_interval_bytes))
        self._bases = [s.base_offset for s in self.segments]
        self.truncated_bytes = 0
        for i, seg in enumerate(self.segments):
            active = i == len(self.segments) - 1
            # Only the tail can be torn by a crash; older segments need their end offset.
            self.truncated_bytes += seg.recover(full=recover_fully and active)
        self._log_start_offset = min(max(self._read_log_start(), self.segments[0].base_offset),
                                     self.log_end_offset)
        self.producer_state = ProducerStateManager()
        self._load_producer_state()
        self._dirty = False
        # Messages appended since the last flush began (Kafka's flush.messages counts them).
        self.unflushed_messages = 0
        # Segments rolled out since the last flush: they still need a full fsync.
        self._rolled: list[Segment] = []
        # Held by ``flush`` (which may run on a worker thread) and by whatever closes
        # segment files, so a flush never fsyncs a descriptor closed under it.
        self._io_lock = threading.Lock()
        self.closed = False
        # The log cleaner's bookkeeping for this partition (see storage.cleaner).
        self.cleaner_checkpoint: object | None = None
        # Tiered storage: the segments in the object store (None: never tiered).
        self.remote: RemoteLogMetadata | None = None

    def attach_remote(self, remote: RemoteLogMetadata) -> None:
        """Join the remote segments to this log (at start-up, or when a topic turns remote
        storage on): the log start offset may then lie below the first local segment."""
        self.remote = remote
        floor = self.segments[0].base_offset
        if remote.start_offset is not None:
            floor = min(floor, remote.start_offset)
        self._log_start_offset = min(max(self._read_log_start(), floor), self.log_end_offset)

    # --- offsets ----------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset a reader may ask for: the first segment's base, or above it
        after DeleteRecords."""
        return self._log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """The first offset held on local disk (the log start offset unless tiered)."""
        return max(self._log_start_offset, self.segments[0].base_offset)

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the log end offset:
        read_committed consumers see nothing at or beyond it."""
        first = self.producer_state.first_unstable_offset()
        return self.log_end_offset if first is None else first

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of aborted transactions overlapping
        ``[start, end)``: what a read_committed Fetch reports so clients drop them."""
        found = [(a.producer_id, a.first_offset)
                 for a in self.producer_state.aborted_between(start, end)]
        if self.remote is not None and start < self.local_log_start_offset:
            # The producer state may have been rebuilt without them (a lost snapshot);
            # the remote segments' own aborted-transaction data is authoritative there.
            found = sorted(set(found) | set(self.remote.aborted_between(start, end)),
                           key=lambda a: a[1])
        return found

    def append_control(self, producer_id: int, producer_epoch: int, committed: bool,
                       coordinator_epoch: int = 0) -> int:
        """Append a COMMIT or ABORT marker for the producer's transaction; returns its
        offset. Closes the transaction in the producer state (the LSO may advance). No
        checks: WriteTxnMarkers calls ``producer_state.check_marker`` first."""
        data = bytearray(build_control_batch(producer_id, producer_epoch, committed,
                                             coordinator_epoch, int(time.time() * 1000)))
        header = parse_header(data)
        offset = self.log_end_offset
        self._maybe_roll(len(data), 1)
        rewrite_base_offset(data, 0, offset, 0)
        stamped = replace(header, base_offset=offset)
        self.producer_state.observe(stamped, committed, coordinator_epoch)
        self.segments[-1].append(data, [stamped])
        self._dirty = True
        return offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- append -----------------------------------------------------------------------

    def append(
        self, data: bytearray, headers: list[BatchHeader], leader_epoch: int = 0
    ) -> AppendResult:
        """Assign offsets to validated batches (rewriting baseOffset in place) and append
        them. Returns the first and last offsets assigned. Does not fsync.

        Idempotent producers: a retried duplicate of a recent batch appends nothing and
        returns the original offsets; a stale epoch or sequence gap raises
        ``KafkaProtocolError`` before anything is written.
        """
        next_offset = self.log_end_offset
        duplicate = self.producer_state.check_all(headers, next_offset)
        if duplicate is not None:
            return AppendResult(duplicate.first_offset, duplicate.last_offset,
                                self.log_start_offset)
        self._maybe_roll(len(data), sum(h.last_offset_delta + 1 for h in headers))
        base = next_offset
        pos = 0
        assigned: list[BatchHeader] = []
        for h in headers:
            rewrite_base_offset(data, pos, next_offset, leader_epoch)
            stamped = replace(h, base_offset=next_offset)
            assigned.append(stamped)
            self.producer_state.observe(stamped)
            next_offset += h.last_offset_delta + 1
            pos += h.size
        self.segments[-1].append(data, assigned)
        self._dirty = True
        self.unflushed_messages += next_offset - base
        return AppendResult(base, next_offset - 1, self.log_start_offset)

    def _maybe_roll(self, incoming_bytes: int, incoming_offsets: int) -> None:
        active = self.segments[-1]
        if active.size == 0:
            return
        too_big = active.size + incoming_bytes > self.config.segment_bytes
        too_old = time.time() * 1000 - active.created_ms > self.config.segment_ms
        last_relative = active.next_offset + incoming_offsets - 1 - active.base_offset
        if too_big or too_old or last_relative > MAX_RELATIVE_OFFSET:
            self.roll()

    def roll(self) -> None:
        """Start a new active segment at the log end offset, snapshotting producer state
        there so a restart replays at most the active segment."""
        seg = Segment(self.directory, self.log_end_offset, self.config.index_interval_bytes)
        self._rolled.append(self.segments[-1])
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        self._write_producer_snapshot()

    # --- producer state ---------------------------------------------------------------

    def _snapshot_paths(self) -> list[tuple[int, Path]]:
        found = [(int(p.stem), p) for p in self.directory.glob("*.snapshot") if p.stem.isdigit()]
        return sorted(found)

    def _write_producer_snapshot(self) -> None:
        """Write the producer state as of the log end offset; keep the newest two."""
        end = self.log_end_offset
        path = self.directory / f"{end:020d}.snapshot"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"offset": end, "state": self.producer_state.snapshot()}))
        os.replace(tmp, path)
        for _, old in self._snapshot_paths()[:-2]:
            old.unlink(missing_ok=True)

    def _load_producer_state(self) -> None:
        """Newest usable snapshot at or below the log end, then replay the batches after it
        (header reads only). Snapshots past the end (a truncated tail) are dropped."""
        end = self.log_end_offset
        start = self.log_start_offset
        for offset, path in reversed(self._snapshot_paths()):
            if offset > end:
                path.unlink(missing_ok=True)
                continue
            try:
                data = json.loads(path.read_text())
                self.producer_state.restore(data["state"])
                start = max(int(data["offset"]), start)
                break
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                self.producer_state = ProducerStateManager()
                continue
        i = max(bisect.bisect_right(self._bases, start) - 1, 0)
        for seg in self.segments[i:]:
            found = seg.find_batch(start) if seg.base_offset <= start else None
            begin = found[0] if found else (0 if seg.base_offset > start else seg.size)
            for pos, header in seg.walk_headers(begin):
                if header.last_offset >= start:
                    marker = None
                    if header.is_control:
                        marker = control_marker(seg.read(pos, header.size))
                    committed, epoch = marker if marker is not None else (None, -1)
                    self.producer_state.observe(header, committed, epoch)

    # --- read -------------------------------------------------------------------------

    def read_region(self, offset: int, max_bytes: int, min_one: bool = True,
                    max_offset: int | None = None) -> RegionResult:
        """Locate whole batches starting with the one holding ``offset``, up to ``max_bytes``,
        as a byte range of one segment file (nothing is read but headers).

        With ``min_one`` the first batch is included even when larger than ``max_bytes``
        (KIP-74), so a consumer always makes progress. Raises ``OffsetOutOfRangeError``
        outside ``[log_start_offset, log_end_offset]``. The region holds a duplicate of
        the segment's descriptor, valid even if the segment is deleted meanwhile: the
        caller must ``close()`` it. ``max_offset`` (the LSO, for read_committed) excludes
        the batches at or beyond it.
        """
        hw = self.log_end_offset
        if offset < self.log_start_offset or offset > hw:
            raise OffsetOutOfRangeError(f"offset {offset} not in [{self.log_start_offset}, {hw}]")
        if offset < self.local_log_start_offset:
            raise RemoteReadRequiredError(f"offset {offset} is in remote storage")
        i = bisect.bisect_right(self._bases, offset) - 1
        while i < len(self.segments):
            seg = self.segments[i]
            found = seg.find_batch(offset)
            if found is not None:
                pos, first = found
                if max_offset is not None and first.base_offset >= max_offset:
                    break
                limit = pos + max_bytes
                if max_offset is not None and max_offset < seg.next_offset:
                    stop = seg.find_batch(max_offset)
                    if stop is not None:
                        limit = min(limit, stop[0])
                if first.size > max_bytes:
                    end = pos + first.size if min_one else pos
                else:
                    end = seg.last_boundary(pos, limit)
                if end > pos:
                    return RegionResult(FileRegion(os.dup(seg.fileno()), pos, end - pos), hw,
                                        self.log_start_offset)
                break
            i += 1
        return RegionResult(None, hw, self.log_start_offset)

    def read(self, offset: int, max_bytes: int, min_one: bool = True,
             max_offset: int | None = None) -> ReadResult:
        """Like ``read_region``, but returns the bytes themselves."""
        result = self.read_region(offset, max_bytes, min_one, max_offset)
        data = b""
        if result.region is not None:
            with result.region:
                data = result.region.read()
        return ReadResult(data, result.high_watermark, result.log_start_offset)

    def batches(self, chunk_bytes: int = 16 * 1024 * 1024) -> Iterator[bytes]:
        """Every stored batch's bytes, oldest first (for replaying internal topics).
        Reads ``chunk_bytes`` at a time; a batch larger than that comes whole."""
        offset = self.log_start_offset
        while offset < self.log_end_offset:
            data = self.read(offset, chunk_bytes).data
            if not data:
                return
            pos = 0
            while pos < len(data):
                header = parse_header(data, pos)
                yield data[pos : pos + header.size]
                offset = header.last_offset + 1
                pos += header.size

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after the log start whose
        timestamp is >= ``timestamp``, or None when none reaches it. The time index finds
        the first batch whose max timestamp reaches it; the batch is then decoded
        (decompressed if need be) to find the record. Batches without such a record (a
        cleaned batch, records below the log start) are skipped. A batch that cannot be
        decoded answers at batch granularity: its base offset and max timestamp."""
        start_offset = self.log_start_offset
        for seg in self.segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= start_offset:
                continue
            start = seg.offset_index.lookup(seg.time_index.lookup(timestamp))
            for pos, header in seg.walk_headers(start):
                if header.max_timestamp < timestamp or header.last_offset < start_offset:
                    continue
                try:
                    stamps = record_timestamps(seg.read(pos, header.size))
                except ProtocolError:
                    return max(header.base_offset, start_offset), header.max_timestamp
                for offset, ts in stamps:
                    if ts >= timestamp and offset >= start_offset:
                        return offset, ts
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with the largest timestamp (KIP-734)."""
        best: tuple[int, int] | None = None
        for seg in self.segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best[1]):
                found = self.offset_for_timestamp(seg.max_timestamp)
                if found is not None:
                    best = found
        return best

    # --- maintenance ------------------------------------------------------------------

    def flush(self, full: bool = False) -> None:
        """Make everything appended so far durable. Blocking (call off the event loop).

        The active segment gets an fdatasync of its log file; segments rolled since the
        last flush are synced with their indexes, and the directory when it gained files.
        ``full`` also syncs the active segment's indexes (clean shutdown).
        """
        if not (self._dirty or full):
            return
        with self._io_lock:
            if self.closed:
                return
            self._dirty = False
            self.unflushed_messages = 0
            rolled, self._rolled = self._rolled, []
            for seg in rolled:
                seg.flush()
            if rolled:
                fsync_dir(self.directory)
            self.segments[-1].flush(data_only=not full)
            logger.debug("flushed %s up to offset %d", self.directory.name,
                         self.log_end_offset)

    def expire_producers(self, now_ms: int) -> int:
        """Forget idle producers (see ``ProducerStateManager.expire``)."""
        return self.producer_state.expire(now_ms, self.config.producer_id_expiration_ms)

    def enforce_retention(self, now_ms: int) -> int:
        """Delete whole non-active segments: those wholly below the log start offset, and,
        with cleanup.policy delete, those past ``retention.ms`` (by their newest record's
        timestamp) or ``retention.bytes``, oldest first, stopping at the first one to keep.
        Returns the number of segments deleted."""
        deleted = self._delete_below_start()
        cfg = self.config
        if not cfg.delete:
            return deleted
        if self.remote is not None and cfg.remote_storage_enable:
            # Tiered: local segments go once copied (storage.tiered_log), remote ones by
            # the whole log's retention, both driven by the broker's tiering task.
            return deleted
        while len(self.segments) > 1:
            oldest = self.segments[0]
            expired = cfg.retention_ms >= 0 and oldest.max_timestamp >= 0 and (
                now_ms - oldest.max_timestamp > cfg.retention_ms
            )
            over = cfg.retention_bytes >= 0 and self.size_bytes - oldest.size >= cfg.retention_bytes
            if not (expired or over):
                break
            self._delete_oldest()
            deleted += 1
        return deleted

    def _delete_below_start(self) -> int:
        deleted = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self._log_start_offset:
            self._delete_oldest()
            deleted += 1
        return deleted

    def _delete_oldest(self, tiered: bool = False) -> None:
        """Delete the oldest segment's files; unless it is ``tiered`` (a copy is in the
        object store), the log start offset moves past it."""
        oldest = self.segments.pop(0)
        self._bases.pop(0)
        with self._io_lock:
            if oldest in self._rolled:
                self._rolled.remove(oldest)
            oldest.delete()
        if not tiered:
            self._log_start_offset = max(self._log_start_offset, self.segments[0].base_offset)
            self.producer_state.forget_aborted_before(self._log_start_offset)

    def advance_log_start(self, offset: int) -> None:
        """Persist a higher log start offset (temp file and rename) and drop what lies
        below it locally: DeleteRecords, and remote retention before it deletes objects."""
        if offset <= self._log_start_offset:
            return
        tmp = self.directory / (LOG_START_FILE + ".tmp")
        tmp.write_text(str(offset))
        os.replace(tmp, self.directory / LOG_START_FILE)
        self._log_start_offset = offset
        self._delete_below_start()
        self.producer_state.forget_aborted_before(offset)

    # --- DeleteRecords ----------------------------------------------------------------

    def _read_log_start(self) -> int:
        try:
            return int((self.directory / LOG_START_FILE).read_text())
        except (OSError, ValueError):
            return 0

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset to ``offset`` (-1: the high
        watermark) and delete the segments wholly below it; returns the new log start
        offset (never lowered). The offset is persisted (temp file and rename: it survives
        ``kill -9``; call ``sync_log_start`` off the loop for power loss) before anything
        is deleted. Raises ``OffsetOutOfRangeError`` beyond the high watermark and
        ``PolicyViolationError`` unless cleanup.policy includes delete, as Kafka does."""
        if not self.config.delete:
            raise PolicyViolationError(
                f"records of {self.directory.name} cannot be deleted: cleanup.policy is "
                f"{self.config.cleanup_policy}")
        target = self.log_end_offset if offset == -1 else offset
        if not 0 <= target <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot delete records before offset {offset}: the high watermark is "
                f"{self.log_end_offset}")
        self.advance_log_start(target)
        return self._log_start_offset

    def sync_log_start(self) -> None:
        """fsync the persisted log start offset. Blocking."""
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(self.directory / LOG_START_FILE, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.directory)

    # --- the cleaner's swap -----------------------------------------------------------

    def replace_segments(self, old: list[Segment], base_offset: int,
                         on_commit: Callable[[], None] | None = None) -> Segment | None:
        """Swap ``old`` (consecutive non-active segments, the first based at
        ``base_offset``) for the cleaned segment written beside them, whose fsynced
        manifest awaits its commit (``storage.swap``). Returns the new segment, or None
        when ``old`` are no longer segments of this open log (retention or a deletion got
        there first): then nothing was committed and the caller discards its files.
        Never blocks for long; the caller then calls ``swap.remove_manifest`` off the loop.
        """
        if self.closed or not old or old[0].base_offset != base_offset:
            return None
        try:
            i = next(k for k, seg in enumerate(self.segments) if seg is old[0])
        except StopIteration:
            return None
        if self.segments[i : i + len(old)] != old or i + len(old) >= len(self.segments):
            return None
        commit_manifest(self.directory, base_offset)
        if on_commit is not None:
            on_commit()
        with self._io_lock:
            for seg in old:
                if seg in self._rolled:
                    self._rolled.remove(seg)
                seg.close()
        finish_swap(self.directory, base_offset, [seg.base_offset for seg in old])
        new = Segment(self.directory, base_offset, self.config.index_interval_bytes)
        new.recover(full=False)
        self.segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [base_offset]
        return new

    def close(self) -> None:
        """Close the files. After a clean shutdown's ``flush(full=True)``, the producer
        state is snapshotted first so the next start replays nothing."""
        with contextlib.suppress(OSError):
            self._write_producer_snapshot()
        with self._io_lock:
            self.closed = True
            for seg in self.segments:
                seg.close()

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


__all__ = ["CLEAN_SHUTDOWN_FILE", "AppendResult", "FileRegion", "PartitionLog", "ReadResult",
           "RegionResult", "fsync_dir"]
