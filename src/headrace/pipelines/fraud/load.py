"""A load generator past one Python process: the fraud run split into shards, each a
process of its own.

One ``FraudGenerator`` in one process tops out near 14,000 records/s (building each record
and its JSON is Python per record; the GIL allows one core). ``run_parallel`` splits a
``FraudConfig`` into ``processes`` shards (``shard_configs``): each has the rate and the
incidents divided by ``processes``, a seed of its own and an id prefix (``p<k>-``), so
shards draw disjoint users and cards and together keep every per-card guarantee of one
run at the full rate. Each shard publishes with its own librdkafka producer, batching
(``linger.ms``, ``batch.size``, lz4), and all start their streams at the same wall-clock
moment; their truths merge into one (``merge_truths``), which scores alerts of the whole
run. Seeded as one run is: same config and processes, same records per shard.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from headrace.pipelines.fraud.config import FraudConfig
from headrace.pipelines.fraud.generator import FraudRunError, FraudTopics, ensure_topics, run
from headrace.pipelines.fraud.stream import FraudGenerator
from headrace.pipelines.fraud.truth import GroundTruth

BATCHING: Mapping[str, Any] = {"linger.ms": 5, "batch.size": 1_000_000,
                               "queue.buffering.max.messages": 500_000,
                               "queue.buffering.max.kbytes": 262_144}
"""Producer settings of each shard: up to 5 ms and 1 MB per partition batch (a batch of
several hundred records at 5,000 records/s a process), lz4 on top of ``run``'s defaults."""


def shard_configs(config: FraudConfig, processes: int) -> list[FraudConfig]:
    """``config`` as ``processes`` runs with disjoint cards whose union has its rate and
    incidents (rates of incidents are divided; each shard's users are its share, at least
    what its rate needs). ``processes`` 1: ``config`` itself."""
    if processes < 1:
        raise FraudRunError(f"processes must be at least 1, not {processes}")
    if processes == 1:
        return [config]
    shards = []
    for k in range(processes):
        shard = dataclasses.replace(
            config, seed=config.seed * 1000 + k, rate=config.rate / processes,
            id_prefix=f"{config.id_prefix}p{k}-",
            velocity_bursts=config.velocity_bursts / processes,
            impossible_travel=config.impossible_travel / processes,
            amount_anomalies=config.amount_anomalies / processes,
            card_testing=config.card_testing / processes,
            profile_updates=config.profile_updates / processes)
        shards.append(dataclasses.replace(
            shard, users=max(math.ceil(config.users / processes), shard.required_users())))
    return shards


def merge_truths(truths: list[GroundTruth]) -> GroundTruth:
    """One truth for shards run side by side (disjoint cards): incidents and counts
    summed, the run's span from the earliest start to the latest end."""
    first = truths[0]
    return dataclasses.replace(
        first, start_ms=min(t.start_ms for t in truths), end_ms=max(t.end_ms for t in truths),
        incidents=tuple(i for t in truths for i in t.incidents),
        partial_incidents=tuple(i for t in truths for i in t.partial_incidents),
        total_txns=sum(t.total_txns for t in truths),
        malformed_count=sum(t.malformed_count for t in truths),
        malformed_txn_ids=tuple(i for t in truths for i in t.malformed_txn_ids),
        late_count=sum(t.late_count for t in truths),
        profile_records=sum(t.profile_records for t in truths),
        users=sum(t.users for t in truths))


@dataclass(frozen=True)
class LoadResult:
    truth: GroundTruth
    """The merged truth of every shard."""
    stream_s: float
    """Wall time from the common start of the streams to the last shard's end."""
    transactions: int
    """Transaction records the shards sent (valid and malformed)."""


def _shard(bootstrap: str, config: FraudConfig, topics: FraudTopics, realtime: bool,
           producer_config: dict[str, Any], registry_url: str, postgres_dsn: str,
           ready: Any, go: Any, sent: Any, results: Any) -> None:
    """One shard, in a process of its own: publish the profiles, say so, wait for the
    common start, stream, put (prefix, truth JSON or error)."""
    try:
        encode = None
        if registry_url:
            from headrace.pipelines.fraud import avro

            encode = avro.register(registry_url, topics.transactions).encode
        table = None
        if postgres_dsn:
            from headrace.pipelines.fraud.profiles_db import ProfileTable

            table = ProfileTable(postgres_dsn)
        generator = FraudGenerator(config)

        def before_stream() -> None:
            ready.put((config.id_prefix, len(generator.world.cards)))
            go.wait()

        def progress(n: int, _elapsed: float) -> None:
            sent.value = n

        truth = run(bootstrap, config, topics=topics, realtime=realtime,
                    producer_config=producer_config, before_stream=before_stream,
                    on_progress=progress, progress_interval_s=0.2, encode_transaction=encode,
                    profile_sink=table.write if table is not None else None,
                    generator=generator)
        results.put((config.id_prefix, truth.to_json()))
    except BaseException as e:  # reported to the parent, which fails loudly
        ready.put((config.id_prefix, 0))
        results.put((config.id_prefix, f"error: {e!r}"))


def run_parallel(bootstrap: str, config: FraudConfig, processes: int, *,
                 topics: FraudTopics | None = None, realtime: bool = True,
                 producer_config: Mapping[str, Any] | None = None,
                 before_stream: Callable[[int], None] | None = None,
                 on_progress: Callable[[int], None] | None = None,
                 registry_url: str = "", postgres_dsn: str = "",
                 timeout_s: float = 600.0) -> LoadResult:
    """Publish ``config``'s run from ``processes`` shard processes (``shard_configs``).
    Blocks until every shard is done. Each shard publishes its profiles (to the profile
    topic, or with ``postgres_dsn`` into that database's ``users`` table); once all have,
    ``before_stream(cards)`` runs here (``cards``: how many the shards hold), then every stream starts (``realtime``: paced on the wall
    clock from now; else flat out). ``on_progress(records)`` gets the records sent since the
    streams started (roughly: each shard reports every 0.2 s), from a thread of this process. Transactions are JSON, or Avro through
    ``registry_url``. ``FraudRunError`` if a shard fails, or takes ``timeout_s`` longer
    than the run's own ``duration_s`` (its profiles, the stream's tail, a loaded machine)."""
    topics = topics or FraudTopics()
    ensure_topics(bootstrap, topics)
    shards = shard_configs(config, processes)
    ctx = multiprocessing.get_context("spawn")  # this process has librdkafka threads
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    counters = [ctx.Value("q", 0, lock=False) for _ in shards]
    settings = {**BATCHING, **(producer_config or {})}
    children = [ctx.Process(target=_shard, name=f"fraud-load-{shard.id_prefix}", daemon=True,
                            args=(bootstrap, shard, topics, realtime, settings, registry_url,
                                  postgres_dsn, ready, go, counter, results))
                for shard, counter in zip(shards, counters, strict=True)]
    for child in children:
        child.start()
    done = threading.Event()
    try:
        # the stream itself lasts duration_s: a run longer than the timeout is no failure
        deadline = time.monotonic() + config.duration_s + timeout_s
        cards = sum(ready.get(timeout=max(deadline - time.monotonic(), 0.1))[1]
                    for _ in children)
        if before_stream is not None:
            before_stream(cards)
        base = sum(c.value for c in counters)
        started = time.monotonic()
        go.set()
        if on_progress is not None:
            def report() -> None:
                while not done.wait(0.2):
                    on_progress(sum(c.value for c in counters) - base)

            threading.Thread(target=report, name="fraud-load-progress", daemon=True).start()
        truths = []
        for _ in children:
            prefix, said = results.get(timeout=max(deadline - time.monotonic(), 0.1))
            if said.startswith("error: "):
                raise FraudRunError(f"load shard {prefix} failed: {said[7:]}")
            truths.append(GroundTruth.from_json(said))
        stream_s = time.monotonic() - started
    except queue.Empty as e:
        raise FraudRunError(f"the load shards did not finish within {timeout_s:g} s of "
                            f"the run's {config.duration_s:g} s") from e
    finally:
        done.set()
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
    truth = merge_truths(truths)
    return LoadResult(truth, stream_s, truth.total_txns + truth.malformed_count)
