"""Tiered storage of a partition log: which segment to copy next, the copy itself, local
retention of copied segments, and total retention of the remote ones (KIP-405's rules).

The order that keeps every offset served exactly once through a crash at any point:
record COPY_SEGMENT_STARTED; write the objects; record COPY_SEGMENT_FINISHED; only then
delete the local segment (when past local retention). Remote deletion: persist the
higher log start offset; record DELETE_SEGMENT_STARTED; delete the objects; drop the
entry. ``reconcile`` removes the objects of any entry a crash left in a STARTED state.
The functions marked *blocking* run on worker threads and touch only the object store
and the descriptors handed to them; the others run on the broker's event loop.
"""

from __future__ import annotations

import io
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headrace.protocol.records import HEADER_SIZE, LOG_OVERHEAD, magic_at, parse_header
from headrace.storage.remote_metadata import RemoteLogMetadata, RemoteSegment
from headrace.storage.remote_store import RemoteStorage
from headrace.storage.segment import Segment

if TYPE_CHECKING:
    from headrace.storage.log import PartitionLog

# A test-only fault point: called with a step name (``copy:objects`` ...) at each step.
CrashHook = Callable[[str], None]


def _no_crash(step: str) -> None:
    pass


def remote_prefix(topic: str, topic_id: str, partition: int) -> str:
    """Object key prefix of a partition: a recreated topic (new id) never meets the old
    one's objects."""
    return f"{topic}-{topic_id}/{partition}"


# --- local retention ------------------------------------------------------------------


def delete_tiered_local(log: PartitionLog, now_ms: int) -> int:
    """Delete local segments already wholly in the object store and past local retention
    (``local.retention.ms`` by their newest record, ``local.retention.bytes`` by the local
    size), oldest first; never the active segment, never one not yet copied. The log
    start offset does not move. Returns the number deleted."""
    assert log.remote is not None
    cfg = log.config
    remote_end = log.remote.end_offset
    keep_ms, keep_bytes = cfg.effective_local_retention_ms, cfg.effective_local_retention_bytes
    deleted = 0
    while len(log.segments) > 1:
        oldest = log.segments[0]
        if oldest.next_offset > remote_end:
            break
        expired = keep_ms >= 0 and oldest.max_timestamp >= 0 and (
            now_ms - oldest.max_timestamp > keep_ms)
        over = keep_bytes >= 0 and log.size_bytes - oldest.size >= keep_bytes
        if not (expired or over):
            break
        log._delete_oldest(tiered=True)
        deleted += 1
    return deleted


# --- copying --------------------------------------------------------------------------


def next_to_copy(log: PartitionLog) -> Segment | None:
    """The next closed segment to copy: the first local one past what the store holds,
    if it is not the active segment and lies wholly below the last stable offset (as
    Kafka: an open transaction's records are never tiered before its marker)."""
    assert log.remote is not None
    remote_end = log.remote.end_offset
    for seg in log.segments[:-1]:
        if seg.next_offset <= max(remote_end, log.log_start_offset) or seg.size == 0:
            continue
        if seg.next_offset > log.last_stable_offset:
            return None
        return seg
    return None


@dataclass
class CopyJob:
    """What a copy needs, gathered on the event loop; the worker owns ``log_fd`` (a
    duplicate, valid even if the segment is deleted meanwhile) and closes it."""

    log_fd: int
    size: int
    index_path: str
    timeindex_path: str
    snapshot: bytes
    aborted: list[tuple[int, int, int]]
    remote: RemoteSegment


def start_copy(log: PartitionLog, seg: Segment) -> CopyJob:
    """Record COPY_SEGMENT_STARTED for ``seg`` (persisted) and gather its copy job."""
    assert log.remote is not None
    aborted = [(a.producer_id, a.first_offset, a.last_offset)
               for a in log.producer_state.aborted_between(seg.base_offset, seg.next_offset)]
    snap_path = log.directory / f"{seg.next_offset:020d}.snapshot"
    try:
        snapshot = snap_path.read_bytes()
    except OSError:
        snapshot = b""  # kept locally only for the newest two rolls; optional remotely
    remote = log.remote.start_copy(seg.base_offset, seg.next_offset, seg.size,
                                   seg.max_timestamp, aborted, [])
    return CopyJob(os.dup(seg.fileno()), seg.size, str(seg.paths[1]), str(seg.paths[2]),
                   snapshot, aborted, remote)


def leader_epochs(fd: int, size: int) -> list[tuple[int, int]]:
    """``(epoch, start_offset)`` where each leader epoch begins in the file. Blocking."""
    found: list[tuple[int, int]] = []
    pos = 0
    while pos + HEADER_SIZE <= size:
        head = os.pread(fd, HEADER_SIZE, pos)
        if len(head) < HEADER_SIZE or magic_at(head) != 2:
            break
        header = parse_header(head)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            break
        if not found or found[-1][0] != header.partition_leader_epoch:
            found.append((header.partition_leader_epoch, header.base_offset))
        pos += header.size
    return found


def copy_segment(store: RemoteStorage, prefix: str, job: CopyJob,
                 crash: CrashHook = _no_crash) -> list[tuple[int, int]]:
    """Write the segment's objects: its indexes, producer snapshot, leader epochs and
    aborted transactions first, the log last. Returns its leader epochs. Blocking; raises
    ``RemoteStorageError`` (the entry stays STARTED and is reconciled)."""
    seg = job.remote
    try:
        epochs = leader_epochs(job.log_fd, job.size)
        small = {
            ".index": _read_file(job.index_path),
            ".timeindex": _read_file(job.timeindex_path),
            ".snapshot": job.snapshot,
            ".leader_epoch": json.dumps(epochs).encode(),
            ".txnindex": b"".join(struct.pack(">qqq", *a) for a in job.aborted),
        }
        for suffix, data in small.items():
            store.put(seg.key(prefix, suffix), io.BytesIO(data), len(data))
        crash("copy:objects")
        with os.fdopen(os.dup(job.log_fd), "rb") as f:
            store.put(seg.key(prefix, ".log"), f, job.size)
        crash("copy:log")
        return epochs
    finally:
        os.close(job.log_fd)


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- remote retention -----------------------------------------------------------------


def remote_victims(log: PartitionLog, now_ms: int) -> list[RemoteSegment]:
    """The remote segments to delete now, oldest first: wholly below the log start
    offset (DeleteRecords), past ``retention.ms`` by their newest record, or while the
    whole log is larger than ``retention.bytes``. The log start offset is advanced past
    them and persisted, then each is recorded DELETE_SEGMENT_STARTED, before returning:
    from here on no reader is sent to them."""
    assert log.remote is not None
    cfg = log.config
    remote = log.remote
    done = remote.finished
    local_unique = sum(s.size for s in log.segments if s.base_offset >= remote.end_offset)
    total = remote.size_bytes + local_unique
    victims: list[RemoteSegment] = []
    for seg in done:
        below = seg.end_offset <= log.log_start_offset
        expired = cfg.delete and cfg.retention_ms >= 0 and seg.max_timestamp >= 0 and (
            now_ms - seg.max_timestamp > cfg.retention_ms)
        over = cfg.delete and cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
        if not (below or expired or over):
            break
        victims.append(seg)
        total -= seg.size
    if victims:
        log.advance_log_start(victims[-1].end_offset)
        victims = [remote.start_delete(seg) for seg in victims]
    return victims


def delete_objects(store: RemoteStorage, prefix: str, segments: list[RemoteSegment],
                   crash: CrashHook = _no_crash) -> None:
    """Delete the segments' objects (idempotent). Blocking; ``RemoteStorageError``."""
    for seg in segments:
        store.delete(seg.keys(prefix))
        crash("delete:objects")


def reconcile(remote: RemoteLogMetadata) -> list[RemoteSegment]:
    """The entries a crash or a failure left mid-copy or mid-delete: the caller deletes
    their objects (``delete_objects``) and then drops them."""
    return remote.orphans()
