"""Group-commit fsync and append notification, on real partition logs (no sockets)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from headrace.broker.state import AppendNotifier, GroupCommitFlusher
from headrace.protocol.records import build_batch, validate_batches
from headrace.storage.config import LogConfig
from headrace.storage.log import PartitionLog


def _append(log: PartitionLog, value: bytes) -> None:
    data = bytearray(build_batch([(None, value)]))
    log.append(data, validate_batches(data))


def test_concurrent_flushes_share_fsyncs(tmp_path: Path) -> None:
    logs = [PartitionLog(tmp_path / f"t-{i}", LogConfig(), recover_fully=False) for i in range(4)]

    async def scenario() -> GroupCommitFlusher:
        flusher = GroupCommitFlusher()

        async def producer(i: int) -> None:
            for n in range(25):
                _append(logs[i], f"{i}-{n}".encode())
                await flusher.flush({logs[i]})

        await asyncio.gather(*(producer(i) for i in range(4)))
        return flusher

    flusher = asyncio.run(scenario())
    # 100 acknowledged appends; concurrent waiters ride the same fsync.
    assert 0 < flusher.fsyncs < 100
    assert all(log.log_end_offset == 25 for log in logs)


def test_flush_waits_for_an_fsync_started_after_the_call(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(), recover_fully=False)

    async def scenario() -> int:
        flusher = GroupCommitFlusher()
        _append(log, b"a")
        first = asyncio.ensure_future(flusher.flush({log}))
        while flusher._waiters or flusher._running is None:  # until the first fsync runs
            await asyncio.sleep(0)
        _append(log, b"b")
        await flusher.flush({log})
        await first
        return flusher.fsyncs

    # The second append cannot be covered by the fsync already in progress.
    assert asyncio.run(scenario()) == 2


def test_notifier_wakes_waiters_of_that_partition_only() -> None:
    async def scenario() -> tuple[bool, bool]:
        notifier = AppendNotifier()
        a = notifier.register([("t", 0)])
        b = notifier.register([("t", 1)])
        notifier.notify(("t", 0))
        await asyncio.sleep(0)
        result = (a.done(), b.done())
        notifier.unregister([("t", 1)], b)
        return result

    assert asyncio.run(scenario()) == (True, False)
