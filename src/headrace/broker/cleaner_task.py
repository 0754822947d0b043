"""The log cleaner's background task: picks the filthiest compacted log and drives a
``storage.cleaner`` pass over it.

The pass's file work (reading segments, writing the cleaned ones, the swap) runs on the
event loop in small steps: each chunk of batches read is handed to the cleaner's worker
process (``storage.cleaner_worker``: decompressing, key map, filtering, recompressing),
and the loop serves requests while it computes; fsyncs run on a worker thread. The
worker process is started on the first pass (a spawned interpreter, niced) and replaced
if it dies. When nothing is due the task sleeps ``backoff_ms``. A failing pass is logged
and retried after the backoff; it never stops the broker.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import time
from collections.abc import Generator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from headrace.broker.state import BrokerState
from headrace.storage.cleaner import CleanStats, Offload, Step, clean, pick_filthiest
from headrace.storage.cleaner_worker import worker_init

log = logging.getLogger("headrace.cleaner")


class CleanerWorker:
    """The one worker process of the cleaner (``None`` pool: not started yet)."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def run(self, step: Offload) -> object:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                initializer=worker_init)
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._pool, step.fn, *step.args)
        except BrokenProcessPool:
            self.close()  # the next pass starts a new one
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


async def drive(pass_: Generator[Step, object, CleanStats], worker: CleanerWorker) -> CleanStats:
    """Run a pass to its end; cancelling the caller closes the pass (its uncommitted
    files are discarded; committed groups stay)."""
    result: object = None
    try:
        while True:
            try:
                step = pass_.send(result)
            except StopIteration as done:
                stats: CleanStats = done.value
                return stats
            if step is None:
                await asyncio.sleep(0)
                result = None
            elif isinstance(step, Offload):
                result = await worker.run(step)
            else:
                result = await asyncio.to_thread(step)
    finally:
        pass_.close()


async def run_cleaner(state: BrokerState) -> None:
    """Clean logs until cancelled."""
    config = state.config.cleaner
    backoff = config.backoff_ms / 1000.0
    worker = CleanerWorker()
    try:
        while True:
            now_ms = int(time.time() * 1000)
            rng = pick_filthiest(state.logs.all_logs(), now_ms)
            if rng is None:
                await asyncio.sleep(backoff)
                continue
            name = rng.log.directory.name
            try:
                stats = await drive(clean(rng, now_ms, config), worker)
            except Exception:  # supervisor: one log's failure must not stop the cleaner
                log.exception("cleaning %s failed", name)
                await asyncio.sleep(backoff)
                continue
            state.metrics.cleaned(stats.bytes_read, stats.bytes_written,
                                  stats.records_read - stats.records_kept, stats.duration_s)
            if stats.aborted:
                log.info("cleaning %s gave up: its segments changed meanwhile", name)
                continue
            log.info("cleaned %s (due: %s; dirty ratio %.2f) up to offset %d: %d -> %d "
                     "bytes, %d -> %d records, %d keys, %d tombstones and %d markers removed, "
                     "%.3f s, %.1f MB/s", name, rng.reason, rng.dirty_ratio, stats.end_offset,
                     stats.bytes_read, stats.bytes_written, stats.records_read,
                     stats.records_kept, stats.map_keys, stats.tombstones_dropped,
                     stats.markers_dropped, stats.duration_s, stats.mb_per_s)
            if stats.bytes_written == stats.bytes_read:
                await asyncio.sleep(backoff)  # nothing changed: do not pick it again at once
    finally:
        worker.close()
