"""The exactly-once sink under kill -9 of the whole Spark application.

A streaming query (``tests.spark.spark_workers.eos_pipeline``: 6 source partitions,
``maxOffsetsPerTrigger``, upper-case, ``repartition(3)``, ``format("headrace")`` sink with
``delivery=exactly-once``, ``Trigger.AvailableNow``) runs in a subprocess of its own
session. The test SIGKILLs every process of that session — driver Python, its JVM, the
PySpark daemon and the Python workers in the middle of their tasks and transactions — at
random points after the query started (some within its first half second, some just
after a micro-batch committed, the others in the first seconds; most in the middle of a
micro-batch: planned in the checkpoint's offset log, not yet in its commit log), restarts it on the same checkpoint each time, and finally lets it finish.
A read_committed consumer must then see every input id exactly once on the output topic.

What a crash does to each delivery mode (``headrace.spark.sink``): Spark replays the last
planned micro-batch after a restart. With ``exactly-once`` every sink task runs in a Kafka
transaction that also moves its batch marker, so a replayed task whose rows committed
writes nothing and one that did not commit is fenced and aborted by its replay. With
``delivery=at-least-once`` the replayed tasks write their rows again: after a crash the
output may hold duplicates (never losses), which is why that mode is not tested here.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from headrace.testing import EmbeddedBroker
from tests.spark.kafka_helpers import create_topic, produce
from tests.spark.spark_workers.supervisor import SparkWorker, read_topic

# eleven Spark applications in turn: its own limit, well above the ~5 min it takes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

RECORDS = 36_000
INPUT_PARTITIONS = 6
OUTPUT_PARTITIONS = 4
MAX_OFFSETS_PER_TRIGGER = 3_000  # 12 micro-batches
KILLS = 10
SESSION_TIMEOUT_S = 90.0


def value_of(i: int) -> bytes:
    return b"id-%06d-payload" % i


def key_of(i: int) -> bytes:
    return b"k%d" % (i % 101)


@dataclass(frozen=True)
class Kill:
    """Where one SIGKILL landed: the seconds after ``started`` (negative: before), the
    checkpoint's last planned and last committed batch, output rows visible."""

    after_start_s: float
    planned: int
    committed: int
    visible: int

    @property
    def mid_batch(self) -> bool:
        return self.planned > self.committed


def last_batch(log_dir: Path) -> int:
    """The highest batch id in a checkpoint's ``offsets`` or ``commits`` log (-1: none)."""
    if not log_dir.is_dir():
        return -1
    return max((int(p.name) for p in log_dir.iterdir() if p.name.isdigit()), default=-1)


def test_exactly_once_sink_survives_repeated_kill_9_of_the_spark_application(
        broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap_servers
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bootstrap, source, INPUT_PARTITIONS)
    create_topic(bootstrap, sink, OUTPUT_PARTITIONS)
    produce(bootstrap, source, [(key_of(i), value_of(i)) for i in range(RECORDS)])
    checkpoint = tmp_path / "checkpoint"
    worker = SparkWorker("tests.spark.spark_workers.eos_pipeline",
                         ["--bootstrap", bootstrap, "--input", source, "--output", sink,
                          "--checkpoint", str(checkpoint),
                          "--max-offsets", str(MAX_OFFSETS_PER_TRIGGER)],
                         tmp_path, "eos")
    rng = random.Random(20261122)
    kills: list[Kill] = []
    try:
        for n in range(KILLS):
            worker.spawn()
            assert worker.wait_for("started", SESSION_TIMEOUT_S), worker.stderr_tail()
            started = time.monotonic()
            # Two kills right after start() (initial offsets, first plan, checkpoint files);
            # three shortly after the incarnation's first micro-batch committed (so later
            # ones are under way and output is partly there, however slow the machine);
            # the others anywhere in the first micro-batches, which take ~5-8 s from a
            # cold start (Python workers, JVM warm-up), later ones under a second.
            if n in (0, 4):
                time.sleep(rng.uniform(0.0, 0.5))
            elif n in (2, 5, 8):
                assert worker.wait_for("batch", SESSION_TIMEOUT_S), worker.stderr_tail()
                time.sleep(rng.uniform(0.0, 1.0))
            else:
                time.sleep(rng.uniform(1.0, 7.0))
            assert not worker.exited(), (
                f"incarnation {worker.incarnations} ended before its kill: "
                f"{worker.events()}\n{worker.stderr_tail()}")
            after_start = round(time.monotonic() - started, 2)
            worker.kill()
            kills.append(Kill(after_start,
                              last_batch(checkpoint / "offsets"),
                              last_batch(checkpoint / "commits"),
                              len(read_topic(bootstrap, sink))))
        assert kills[-1].visible < RECORDS, f"all written before the last kill: {kills}"
        worker.spawn()
        assert worker.wait_exit(180) == 0, worker.stderr_tail()
    finally:
        worker.kill()
    assert any(e.startswith("done") for e in worker.events())
    assert last_batch(checkpoint / "commits") == last_batch(checkpoint / "offsets")

    out = read_topic(bootstrap, sink)
    got = Counter(value for _, _, _, value in out)
    want = Counter(value_of(i).upper() for i in range(RECORDS))
    missing = sorted((want - got).elements())
    extra = sorted((got - want).elements())
    assert not missing and not extra, (
        f"{len(out)} records for {RECORDS}: {len(missing)} missing (first {missing[:3]}), "
        f"{len(extra)} extra (first {extra[:3]}); kills: {kills}")
    keys = {value: key for _, _, key, value in out}
    assert all(keys[value_of(i).upper()] == key_of(i) for i in range(0, RECORDS, 997))

    # The kills must have hit a running query, not just start-ups.
    assert sum(k.mid_batch for k in kills) >= 3, kills
    assert any(0 < k.visible < RECORDS for k in kills), kills
    print(f"kills: {kills}")
