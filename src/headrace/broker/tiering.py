"""Tiered storage in the broker (KIP-405): the background task that copies closed
segments to the object store and applies remote retention, and the remote reads that
Fetch and ListOffsets hand to it.

Copies run one at a time on a copier thread; remote reads on ``remote.log.reader.threads``
reader threads with a bounded chunk cache (``storage.remote_reader``), so a consumer
reading cold data never holds up the event loop, and fetches of hot data go on meanwhile.
A store that is down fails the copy (retried on the next pass, the STARTED entry's
objects removed first) and fails cold reads with the retriable KAFKA_STORAGE_ERROR.

Fault injection for the crash tests: ``HEADRACE_TIERING_CRASH_AT=<step>`` makes the
broker SIGKILL itself at that step (``copy:started``, ``copy:objects``, ``copy:log``,
``copy:finished``, ``delete:started``, ``delete:objects``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from headrace.broker.counters import BrokerMetrics
from headrace.broker.errors import error_code_for
from headrace.errors import HeadraceError
from headrace.protocol.fetch_response import FetchPartition, FetchTopic
from headrace.storage.log import PartitionLog
from headrace.storage.manager import LogManager
from headrace.storage.remote_config import RemoteLogConfig
from headrace.storage.remote_metadata import RemoteSegment
from headrace.storage.remote_reader import RemoteReader
from headrace.storage.remote_store import RemoteStorage, RemoteStorageError
from headrace.storage.tiered_log import (
    copy_segment,
    delete_objects,
    delete_tiered_local,
    next_to_copy,
    remote_victims,
    start_copy,
)

log = logging.getLogger("headrace.tiering")
CRASH_ENV = "HEADRACE_TIERING_CRASH_AT"
T = TypeVar("T")


def _crash(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        log.warning("fault injection: dying at %s", step)
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class TieringStats:
    """Counters for the metrics endpoint (event-loop thread only)."""

    segments_copied: int = 0
    bytes_copied: int = 0
    copy_seconds: float = 0.0
    copy_errors: int = 0
    segments_deleted: int = 0
    delete_errors: int = 0


class RemoteTier:
    """The broker's tiered storage: store, reader, workers, background task."""

    def __init__(self, config: RemoteLogConfig, logs: LogManager) -> None:
        self.config = config
        self.logs = logs
        self.store: RemoteStorage = config.open_store()
        self._readers = ThreadPoolExecutor(config.reader_threads, "remote-reader")
        # read-ahead on its own thread, so it never delays a fetch waiting for a reader
        self._prefetcher = ThreadPoolExecutor(1, "remote-read-ahead")
        self.reader = RemoteReader(self.store, config.chunk_bytes, config.cache_bytes,
                                   read_ahead=self._prefetcher)
        self._copier = ThreadPoolExecutor(1, "remote-copier")
        self.stats = TieringStats()
        self.wake = asyncio.Event()

    # --- reads (Fetch, ListOffsets) -------------------------------------------------------

    async def read(self, plog: PartitionLog, offset: int, max_bytes: int,
                   min_one: bool) -> bytes:
        """Whole batches from the remote segment holding ``offset`` (b"": none holds it,
        e.g. deleted meanwhile). ``RemoteStorageError`` when the store fails."""
        assert plog.remote is not None
        seg = plog.remote.segment_for(offset)
        if seg is None:
            return b""
        return await asyncio.get_running_loop().run_in_executor(
            self._readers, self.reader.read, plog.remote.prefix, seg, offset, max_bytes,
            min_one)

    def _cold(self, plog: PartitionLog) -> list[RemoteSegment]:
        """Remote segments holding offsets not on local disk, above the log start."""
        if plog.remote is None:
            return []
        start, local = plog.log_start_offset, plog.local_log_start_offset
        return [s for s in plog.remote.finished if s.end_offset > start and s.base_offset < local]

    async def offset_for_timestamp(self, plog: PartitionLog,
                                   timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time over the remote part, then the local one."""
        loop = asyncio.get_running_loop()
        assert plog.remote is not None
        for seg in self._cold(plog):
            if seg.max_timestamp < timestamp:
                continue
            found = await loop.run_in_executor(
                self._readers, self.reader.offset_for_timestamp, plog.remote.prefix, seg,
                timestamp, plog.log_start_offset)
            if found is not None:
                return found
        return plog.offset_for_timestamp(timestamp)

    async def max_timestamp(self, plog: PartitionLog) -> tuple[int, int] | None:
        """KIP-734's max timestamp over the remote and local parts."""
        best = plog.max_timestamp()
        cold = self._cold(plog)
        top = max(cold, key=lambda s: s.max_timestamp, default=None)
        if top is not None and top.max_timestamp >= 0 and (
                best is None or top.max_timestamp > best[1]):
            assert plog.remote is not None
            found = await asyncio.get_running_loop().run_in_executor(
                self._readers, self.reader.offset_for_timestamp, plog.remote.prefix, top,
                top.max_timestamp, plog.log_start_offset)
            if found is not None:
                return found
        return best

    # --- the background task --------------------------------------------------------------

    async def run(self) -> None:
        """Copy, expire and clean up until cancelled; every pass's failure is logged and
        the next pass retries."""
        while True:
            try:
                await self.pass_once(int(time.time() * 1000))
            except asyncio.CancelledError:
                raise
            except Exception:  # supervisor: a failed pass must not stop the next ones
                log.exception("tiering pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.config.task_interval_ms / 1000)
            self.wake.clear()

    async def _in_copier(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._copier, fn, *args)

    async def pass_once(self, now_ms: int) -> None:
        for marker, prefix in self.logs.pending_remote_deletes():
            try:
                await self._in_copier(self.store.delete_tree, prefix)
                marker.unlink(missing_ok=True)
            except RemoteStorageError as e:
                log.warning("deleting the objects of a deleted topic (%s): %s", prefix, e)
        for topic in list(self.logs.topics.values()):
            for plog in list(topic.partitions):
                if plog.remote is None or plog.closed:
                    continue
                try:
                    await self._pass_partition(plog, now_ms)
                except RemoteStorageError as e:
                    log.warning("tiering %s: %s (retried next pass)", plog.directory.name, e)

    async def _pass_partition(self, plog: PartitionLog, now_ms: int) -> None:
        remote = plog.remote
        assert remote is not None
        orphans = remote.orphans()
        if orphans:
            try:
                await self._in_copier(delete_objects, self.store, remote.prefix, orphans, _crash)
            except RemoteStorageError:
                self.stats.delete_errors += 1
                raise
            if plog.closed:
                return
            for orphan in orphans:
                remote.drop(orphan)
        if plog.config.remote_storage_enable:
            while (seg := next_to_copy(plog)) is not None:
                job = start_copy(plog, seg)
                _crash("copy:started")
                started = time.monotonic()
                try:
                    epochs = await self._in_copier(copy_segment, self.store, remote.prefix,
                                                   job, _crash)
                except RemoteStorageError:
                    self.stats.copy_errors += 1
                    raise
                if plog.closed:
                    return
                remote.finish_copy(job.remote, epochs)
                self.stats.segments_copied += 1
                self.stats.bytes_copied += job.size
                self.stats.copy_seconds += time.monotonic() - started
                _crash("copy:finished")
            if plog.config.delete:
                delete_tiered_local(plog, now_ms)
        victims = remote_victims(plog, now_ms)
        if victims:
            _crash("delete:started")
            try:
                await self._in_copier(delete_objects, self.store, remote.prefix, victims, _crash)
            except RemoteStorageError:
                self.stats.delete_errors += 1
                raise
            if plog.closed:
                return
            for victim in victims:
                remote.drop(victim)
            self.stats.segments_deleted += len(victims)

    def upload_lag(self, plog: PartitionLog) -> tuple[int, int]:
        """``(bytes, segments)`` of closed local segments not yet in the store."""
        if plog.remote is None or not plog.config.remote_storage_enable:
            return 0, 0
        end = max(plog.remote.end_offset, plog.log_start_offset)
        waiting = [s for s in plog.segments[:-1] if s.next_offset > end]
        return sum(s.size for s in waiting), len(waiting)

    def close(self) -> None:
        self._readers.shutdown(wait=False, cancel_futures=True)
        self._prefetcher.shutdown(wait=False, cancel_futures=True)
        self._copier.shutdown(wait=False, cancel_futures=True)
        self.store.close()


# (topic index, partition index, log, offset, byte limit, min_one) of a Fetch response's
# partition to read from the object store
RemoteRead = tuple[int, int, PartitionLog, int, int, bool]


async def fill_remote_reads(tier: RemoteTier, metrics: BrokerMetrics, topics: list[FetchTopic],
                            reads: list[RemoteRead]) -> None:
    """Fill a Fetch response's placeholders with remote reads (on the reader threads); a
    failure answers that partition with its error code (KAFKA_STORAGE_ERROR for the
    store's: retriable)."""
    for t, i, plog, offset, limit, min_one in reads:
        part = topics[t].partitions[i]
        try:
            data = await tier.read(plog, offset, limit, min_one)
        except (HeadraceError, OSError) as e:
            topics[t].partitions[i] = FetchPartition(
                part.partition_index, error_code_for(e), -1, -1, -1, None, -1, records=b"",
                records_length=0)
            continue
        part.records = data
        part.records_length = len(data)
        metrics.fetched((topics[t].topic, part.partition_index), len(data))
