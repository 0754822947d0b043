"""The log cleaner: compaction of partitions whose cleanup.policy includes compact.

Kafka's algorithm. A partition's log is a clean part ``[log start, first dirty)``,
compacted before, and a dirty part ``[first dirty, end)`` ending at the first segment that
cannot be cleaned yet: the active one, one holding the oldest open transaction (the last
stable offset), or one with records younger than min.compaction.lag.ms. A log is picked
when its dirty bytes reach min.cleanable.dirty.ratio of the whole (or its oldest dirty
record is older than max.compaction.lag.ms, or a delete horizon has passed). A pass then

1. builds an ``OffsetMap`` (key -> latest offset) over the dirty part, leaving out control
   batches and aborted transactions; a full map ends the pass at a segment boundary;
2. rewrites every segment of ``[log start, end)``, in groups of consecutive segments that
   fit in segment.bytes, keeping a record only if no later record has its key. Offsets are
   preserved: a rebuilt batch keeps its base offset, last offset delta, producer id,
   epoch and base sequence, so gaps appear but no offset moves and producers' sequence
   checks still hold; surviving records are copied byte for byte and recompressed with the
   batch's codec. Each group is swapped in crash-safely (``storage.swap``).

Tombstones, transaction markers, transactions (KIP-534, KIP-98):

* a tombstone (null value) that is the latest for its key stays until its batch's delete
  horizon: the first pass that rewrites the batch stamps ``now + delete.retention.ms`` in
  its base timestamp (attribute bit 0x40); a pass after that time drops the tombstone;
* records of aborted transactions are dropped (the aborted ranges come from the producer
  state); a COMMIT or ABORT marker is dropped once no batch of its transaction is left in
  the log and its own delete horizon has passed;
* the last data batch of each live producer (or its last marker, when it has no data) is
  kept, emptied of records if need be, so its epoch and sequence survive for idempotence;
* records without a key are dropped (Kafka calls them invalid in a compacted topic; Produce
  refuses them there, but a topic switched from delete to compact may hold some).

The pass is a generator run on the broker's event loop. It does the file work itself
(reads through its own duplicated descriptors, so retention deleting a segment meanwhile
does not disturb it; the swap then declines) and yields the rest: ``Offload`` steps,
chunks of whole batches for ``storage.cleaner_worker`` (the CPU-heavy part, run by the
broker in a separate niced process), and blocking calls (fsyncs) for a worker thread.
``run_to_completion`` runs every step inline instead.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import cast

from headrace.protocol.records import HEADER_SIZE, BatchHeader, parse_header
from headrace.storage.batch_cleaner import CleanStats
from headrace.storage.cleaner_worker import (
    PassResult,
    PassSetup,
    begin_pass,
    clean_batches,
    end_pass,
    map_batches,
)
from headrace.storage.log import PartitionLog
from headrace.storage.segment import MAX_RELATIVE_OFFSET, Segment, read_batches
from headrace.storage.swap import CLEANED, discard_cleaned, remove_manifest, write_manifest_tmp

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-checkpoint.json"
_PASS_IDS = itertools.count(1)
# Bytes read per pread: small enough that a cold read does not hold the event loop long.
READ_CHUNK = 1024 * 1024
# Fault-injection seam for crash-safety tests: called with the name of each point of the
# swap ("before-commit", "after-commit", "after-swap"). None in production; only a test
# installs one (set_fault_hook), e.g. a launcher that SIGKILLs the broker at a point.
_fault_hook: Callable[[str], None] | None = None


def set_fault_hook(hook: Callable[[str], None] | None) -> None:
    """Install (or remove, with None) the test-only fault hook. Not for production use."""
    global _fault_hook
    _fault_hook = hook



@dataclass(frozen=True)
class Offload:
    """A CPU-heavy call (``storage.cleaner_worker``) for the cleaner's worker process."""

    fn: Callable[..., object]
    args: tuple[object, ...]


# What a pass yields: None to let the event loop run, a blocking call (fsync) for a
# worker thread, or an ``Offload`` for the worker process; each gets the call's result.
Step = Offload | Callable[[], object] | None


@dataclass(frozen=True)
class CleanerConfig:
    """Broker-wide cleaner settings (Kafka's log.cleaner.*)."""

    enabled: bool = True
    # Pause between looks for work when no log needs cleaning.
    backoff_ms: int = 15_000
    # Rough memory bound of one pass's offset map (in the worker process).
    dedupe_buffer_size: int = 128 * 1024 * 1024
    # Bytes of whole batches sent to the worker process at a time.
    chunk_bytes: int = 256 * 1024


@dataclass
class CleanerCheckpoint:
    """Per partition, persisted: where the dirty part starts, and the earliest delete
    horizon still pending in the log (-1: none)."""

    first_dirty_offset: int = 0
    next_horizon_ms: int = -1


def load_checkpoint(plog: PartitionLog) -> CleanerCheckpoint:
    """The partition's checkpoint (cached on the log; read from its file once)."""
    cached = plog.cleaner_checkpoint
    if isinstance(cached, CleanerCheckpoint):
        return cached
    cp = CleanerCheckpoint()
    try:
        data = json.loads((plog.directory / CHECKPOINT_FILE).read_text())
        cp = CleanerCheckpoint(int(data["first_dirty_offset"]), int(data["next_horizon_ms"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    plog.cleaner_checkpoint = cp
    return cp


def save_checkpoint(plog: PartitionLog, cp: CleanerCheckpoint) -> None:
    """Persist (temp file and rename, no fsync: a lost checkpoint only means cleaning again)."""
    plog.cleaner_checkpoint = cp
    tmp = plog.directory / (CHECKPOINT_FILE + ".tmp")
    tmp.write_text(json.dumps({"first_dirty_offset": cp.first_dirty_offset,
                               "next_horizon_ms": cp.next_horizon_ms}))
    os.replace(tmp, plog.directory / CHECKPOINT_FILE)


@dataclass(frozen=True)
class CleanableRange:
    """What a pass over ``log`` would clean, and why it is due (``reason``)."""

    log: PartitionLog
    first_dirty: int
    end: int
    clean_bytes: int
    dirty_bytes: int
    reason: str

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_range(plog: PartitionLog, now_ms: int) -> CleanableRange | None:
    """The range a pass would clean if one is due now, else None. Cheap: in-memory sizes
    and at most one batch header read."""
    cfg = plog.config
    if not cfg.compact or plog.closed or len(plog.segments) < 2:
        return None
    cp = load_checkpoint(plog)
    start = plog.log_start_offset
    active = plog.segments[-1]
    first_dirty = min(max(cp.first_dirty_offset, start), active.base_offset)
    limit = min(plog.last_stable_offset, active.base_offset)
    end = active.base_offset
    lag_horizon = now_ms - cfg.min_compaction_lag_ms
    clean_bytes = dirty_bytes = 0
    first_dirty_seg: Segment | None = None
    for seg in plog.segments[:-1]:
        if seg.next_offset <= start and seg.size:
            continue
        if seg.next_offset <= first_dirty:
            clean_bytes += seg.size
            continue
        if seg.next_offset > limit or (cfg.min_compaction_lag_ms > 0
                                       and seg.max_timestamp > lag_horizon):
            end = seg.base_offset
            break
        dirty_bytes += seg.size
        first_dirty_seg = first_dirty_seg or seg
    reason = ""
    if dirty_bytes and dirty_bytes >= cfg.min_cleanable_dirty_ratio * (clean_bytes + dirty_bytes):
        reason = "dirty ratio"
    elif first_dirty_seg is not None and _first_timestamp(first_dirty_seg) < now_ms - cfg.max_compaction_lag_ms:
        reason = "max.compaction.lag.ms"
    elif 0 <= cp.next_horizon_ms <= now_ms and clean_bytes:
        reason = "delete horizon"
        if not dirty_bytes:
            end = first_dirty
    if not reason or end <= start:
        return None
    return CleanableRange(plog, first_dirty, end, clean_bytes, dirty_bytes, reason)


def _first_timestamp(seg: Segment) -> int:
    head = seg.read(0, HEADER_SIZE)
    return parse_header(head).max_timestamp if len(head) == HEADER_SIZE else 2**63 - 1


def pick_filthiest(logs: Iterable[PartitionLog], now_ms: int) -> CleanableRange | None:
    """The due log with the highest dirty ratio (Kafka's choice), or None."""
    due = [r for r in (cleanable_range(plog, now_ms) for plog in logs) if r is not None]
    return max(due, key=lambda r: r.dirty_ratio, default=None)


def _crash_point(name: str) -> None:
    if _fault_hook is not None:
        _fault_hook(name)


def _on_commit(committed: list[bool]) -> None:
    committed.append(True)
    _crash_point("after-commit")


def _groups(segments: list[Segment], max_bytes: int) -> list[list[Segment]]:
    """Consecutive segments whose sizes add up to at most ``max_bytes`` (each group at
    least one segment) and whose offsets fit one segment's relative range."""
    groups: list[list[Segment]] = []
    for seg in segments:
        if groups:
            g = groups[-1]
            size = sum(s.size for s in g) + seg.size
            if size <= max_bytes and seg.next_offset - 1 - g[0].base_offset <= MAX_RELATIVE_OFFSET:
                g.append(seg)
                continue
        groups.append([seg])
    return groups


def _chunks(fd: int, size: int, chunk_bytes: int) -> Iterator[list[bytes]]:
    """The segment's batches, whole, in lists of about ``chunk_bytes``."""
    chunk: list[bytes] = []
    n = 0
    for _, _, raw in read_batches(fd, 0, size, READ_CHUNK):
        chunk.append(raw)
        n += len(raw)
        if n >= chunk_bytes:
            yield chunk
            chunk, n = [], 0
    if chunk:
        yield chunk


def clean(rng: CleanableRange, now_ms: int,
          config: CleanerConfig) -> Generator[Step, object, CleanStats]:
    """One cleaning pass over ``rng`` (see the module docstring). Drive it with
    ``run_to_completion`` or the broker's async driver; closing it early discards the
    uncommitted group (committed groups stay: each is a complete, valid clean)."""
    plog = rng.log
    stats = CleanStats(end_offset=rng.end)
    began = time.perf_counter()
    start = plog.log_start_offset
    in_range = [s for s in plog.segments[:-1]
                if s.base_offset < rng.end and (s.next_offset > start or not s.size)]
    fds = {id(s): (os.dup(s.fileno()), s.size) for s in in_range}
    pass_id = next(_PASS_IDS)
    setup = PassSetup(
        pass_id, rng.first_dirty, now_ms, plog.config.delete_retention_ms,
        config.dedupe_buffer_size, tuple(plog.producer_state.aborted),
        {pid: (e.batches[-1].last_offset if e.batches else None, e.epoch)
         for pid, e in plog.producer_state.producers.items()})
    try:
        yield Offload(begin_pass, (setup,))
        end = rng.end
        full = False
        for k, seg in enumerate(s for s in in_range if s.next_offset > rng.first_dirty):
            if full and k > 0:
                end = seg.base_offset
                break
            fd, size = fds[id(seg)]
            for chunk in _chunks(fd, size, config.chunk_bytes):
                full = bool((yield Offload(map_batches, (pass_id, chunk))))
        stats.end_offset = end
        for group in _groups([s for s in in_range if s.base_offset < end],
                             plog.config.segment_bytes):
            base = group[0].base_offset
            discard_cleaned(plog.directory, base)
            out = Segment(plog.directory, base, plog.config.index_interval_bytes, suffix=CLEANED)
            # Set the moment the manifest is committed: from then on the cleaned files are
            # the log's and must never be discarded, whatever happens next.
            committed: list[bool] = []
            try:
                for seg in group:
                    fd, size = fds[id(seg)]
                    stats.bytes_read += size
                    for chunk in _chunks(fd, size, config.chunk_bytes):
                        kept = yield Offload(clean_batches, (pass_id, chunk))
                        data, fields = cast(tuple[bytes, list[tuple[int, ...]]], kept)
                        if data:
                            out.append(data, [BatchHeader(*f) for f in fields])
                stats.bytes_written += out.size
                yield out.flush
                out.close()
                replaced = [s.base_offset for s in group]
                yield partial(write_manifest_tmp, plog.directory, base, replaced)
                _crash_point("before-commit")
                if plog.replace_segments(group, base, partial(_on_commit, committed)) is None:
                    stats.aborted = True
                    return stats
                _crash_point("after-swap")
                stats.segments_in += len(group)
                stats.segments_out += 1
                yield partial(remove_manifest, plog.directory, base)
            finally:
                out.close()
                if not committed:
                    discard_cleaned(plog.directory, base)
        result = cast(PassResult, (yield Offload(end_pass, (pass_id,))))
        for name in ("records_read", "records_kept", "map_keys", "tombstones_dropped",
                     "markers_dropped", "aborted_records_dropped", "unreadable_batches"):
            setattr(stats, name, getattr(result.stats, name))
        cp = load_checkpoint(plog)
        save_checkpoint(plog, CleanerCheckpoint(max(cp.first_dirty_offset, end),
                                                result.next_horizon))
        removed = set(result.removed_aborts)
        if removed:
            plog.producer_state.aborted = [a for a in plog.producer_state.aborted
                                           if (a.producer_id, a.last_offset) not in removed]
        stats.removed_aborts = sorted(removed)
        return stats
    finally:
        for fd, _ in fds.values():
            os.close(fd)
        stats.duration_s = time.perf_counter() - began


def run_step(step: Step) -> object:
    """Run one step inline (in this process and thread)."""
    if step is None:
        return None
    if isinstance(step, Offload):
        return step.fn(*step.args)
    return step()


def run_to_completion(pass_: Generator[Step, object, CleanStats]) -> CleanStats:
    """Drive a pass synchronously, running every step inline (tests, tools)."""
    result: object = None
    try:
        while True:
            result = run_step(pass_.send(result))
    except StopIteration as done:
        stats: CleanStats = done.value
        return stats


__all__ = ["CleanStats", "CleanableRange", "CleanerCheckpoint", "CleanerConfig",
           "Offload", "Step", "clean", "cleanable_range", "load_checkpoint", "pick_filthiest",
           "run_step", "run_to_completion", "save_checkpoint", "set_fault_hook"]
