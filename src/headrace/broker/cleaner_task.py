"""The log cleaner's background task: picks the filthiest compacted log and drives a
``storage.cleaner`` pass over it on the event loop.

A pass is a generator: between its slices (at most ``log.cleaner`` ``slice_ms`` of work
each) the loop serves requests, and its blocking steps (fsyncs) run on a worker thread.
When nothing is due the task sleeps ``backoff_ms``. A failing pass is logged and retried
after the backoff; it never stops the broker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Generator

from headrace.broker.state import BrokerState
from headrace.storage.cleaner import CleanStats, Step, clean, pick_filthiest

log = logging.getLogger("headrace.cleaner")


async def drive(pass_: Generator[Step, object, CleanStats]) -> CleanStats:
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
            else:
                result = await asyncio.to_thread(step)
    finally:
        pass_.close()


async def run_cleaner(state: BrokerState) -> None:
    """Clean logs until cancelled."""
    config = state.config.cleaner
    backoff = config.backoff_ms / 1000.0
    while True:
        now_ms = int(time.time() * 1000)
        rng = pick_filthiest(state.logs.all_logs(), now_ms)
        if rng is None:
            await asyncio.sleep(backoff)
            continue
        name = rng.log.directory.name
        try:
            stats = await drive(clean(rng, now_ms, config))
        except Exception:  # supervisor: one log's failure must not stop the cleaner
            log.exception("cleaning %s failed", name)
            await asyncio.sleep(backoff)
            continue
        if stats.aborted:
            log.info("cleaning %s gave up: its segments changed meanwhile", name)
            continue
        log.info("cleaned %s (due: %s; dirty ratio %.2f) up to offset %d: %d -> %d bytes, "
                 "%d -> %d records, %d keys, %d tombstones and %d markers removed, "
                 "%.3f s, %.1f MB/s", name, rng.reason, rng.dirty_ratio, stats.end_offset,
                 stats.bytes_read, stats.bytes_written, stats.records_read, stats.records_kept,
                 stats.map_keys, stats.tombstones_dropped, stats.markers_dropped,
                 stats.duration_s, stats.mb_per_s)
        if stats.bytes_written == stats.bytes_read:
            await asyncio.sleep(backoff)  # nothing changed: do not pick it again at once
