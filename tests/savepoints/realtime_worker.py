"""Worker for the real-time path's savepoint test: the fraud query in Real-Time Mode (the
exactly-once sink, checkpoints every 5 s) switched twice through savepoints while traffic
flows, in one Spark application (``local[5]``: 2 one-partition topics + up to 3 shuffle
partitions).

``python -m tests.savepoints.realtime_worker BOOTSTRAP WORKDIR PREFIX`` (topics
``PREFIX-transactions`` etc.; checkpoints and savepoints under ``WORKDIR``); a background
producer writes a transaction of a new card (never alerted) every 0.2 s throughout.

1. ``PHASES[0]`` is produced, the query starts (the detector's thresholds; ``cp-1``) and
   runs until a committed batch has read it; the savepoint ``sp-running`` is taken of the
   running query (says ``savepoint running <batch> <keys>``); ``PHASES[1]`` (an impossible
   travel and a malformed record) is produced and, once its alert and dead letter are
   readable, the query is stopped: that output was committed after the savepoint's batch.
2. The query starts from ``sp-running`` (``cp-2``) with the velocity threshold lowered from
   5 to 4, replaying ``PHASES[1]``; once it has committed a batch, ``PHASES[2]`` is produced
   (card c1's fourth transaction: a velocity alert counting three from before the first
   stop; another impossible travel); once those alerts are readable it is stopped (says
   ``skipped <n>``: the sink's skips so far) and the savepoint ``sp-stopped`` is taken of
   the stopped query (says ``savepoint stopped <batch> <keys> <next transaction offset>``).
3. The query starts from ``sp-stopped`` (``cp-3``) with 3 shuffle partitions instead of 2;
   ``PHASES[3]`` (a third impossible travel) is produced; once its alert is readable it is
   stopped; says ``done <skipped>``.

Says ``failed <why>`` and exits if a query dies or a wait runs out.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from headrace.pipelines.fraud.pipeline import PipelineTopics
from headrace.pipelines.fraud.realtime import RealtimeConfig, start
from headrace.pipelines.fraud.rules import Thresholds
from headrace.savepoints import SavepointError, create
from headrace.savepoints.checkpoint import committed_batch
from headrace.testing import scaled
from tests.spark.kafka_helpers import read_all
from tests.spark.spark_workers.common import build_session, say

BASE = 1_700_000_000_000
BERLIN, NEW_YORK = (52.5, 13.4, "Berlin"), (40.7, -74.0, "New York")

Txn = tuple[str, str, int, tuple[float, float, str]]
"""(transaction id, card, event time offset from BASE in ms, place)."""

PHASES: tuple[tuple[Txn | None, ...], ...] = (
    (("a0", "c1", 0, BERLIN), ("a1", "c1", 1_000, BERLIN), ("a2", "c1", 2_000, BERLIN),
     ("a3", "c2", 500, BERLIN)),
    (("b0", "c3", 10_000, BERLIN), None, ("b1", "c3", 70_000, NEW_YORK),
     ("b2", "c2", 80_000, BERLIN)),
    (("c0", "c1", 3_000, BERLIN), ("c1", "c6", 20_000, BERLIN),
     ("c2", "c6", 80_000, NEW_YORK)),
    (("d0", "c7", 30_000, BERLIN), ("d1", "c7", 90_000, NEW_YORK)),
)
"""The traffic of each step; None is a malformed record (a dead letter)."""

EXPECTED = sorted([("b1", "c3", ["impossible_travel"]), ("c0", "c1", ["velocity"]),
                   ("c2", "c6", ["impossible_travel"]), ("d1", "c7", ["impossible_travel"])])
"""The alerts (transaction, card, reasons): each phase's, once."""


def topics(prefix: str) -> PipelineTopics:
    return PipelineTopics(transactions=f"{prefix}-transactions", profiles=f"{prefix}-profiles",
                          alerts=f"{prefix}-alerts", late=f"{prefix}-late",
                          dead_letters=f"{prefix}-dlq")


def txn_value(txn_id: str, card: str, t: int, place: tuple[float, float, str]) -> bytes:
    lat, lon, city = place
    return json.dumps({"txn_id": txn_id, "card_id": card, "user_id": "u-" + card,
                       "merchant_id": "m1", "amount": 25.0, "lat": lat, "lon": lon,
                       "city": city, "event_time": BASE + t}).encode()


def committed_transactions(checkpoint: Path, topic: str) -> int:
    """Transactions read by the query's committed batches (0 before the first commit)."""
    try:
        batch = committed_batch(checkpoint)
    except SavepointError:
        return 0
    return sum(sum(int(o) for o in (source or {}).get(topic, {}).values())
               for source in batch.sources)


class Failed(Exception):
    pass


def wait(what: str, done: Callable[[], bool], query: StreamingQuery) -> None:
    deadline = time.monotonic() + scaled(120)
    while not done():
        if not query.isActive:
            raise Failed(f"the query died waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise Failed(f"no {what} in {scaled(120):g} s")
        time.sleep(0.2)


def readable(bootstrap: str, names: PipelineTopics, txn_ids: set[str], dead: int = 0
             ) -> Callable[[], bool]:
    """True once the alerts of ``txn_ids`` and ``dead`` dead letters are readable."""
    def check() -> bool:
        alerted = {json.loads(m.value())["txn_id"] for m in read_all(bootstrap, names.alerts)}
        return txn_ids <= alerted and len(read_all(bootstrap, names.dead_letters)) >= dead
    return check


def skipped(spark: SparkSession) -> int:
    jvm_view = spark.sparkContext._jvm
    assert jvm_view is not None
    return int(jvm_view.io.headrace.realtime.ExactlyOnceKafkaWriter.counters()[1])


def main() -> None:
    bootstrap, workdir, prefix = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    names = topics(prefix)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "enable.idempotence": True})
    lock = threading.Lock()

    def produce(phase: int) -> None:
        with lock:
            for txn in PHASES[phase]:
                if txn is None:
                    producer.produce(names.transactions, b"{not json", key=b"bad")
                else:
                    producer.produce(names.transactions, txn_value(*txn), key=txn[1].encode())
            assert producer.flush(scaled(30)) == 0

    stop = threading.Event()

    def background() -> None:
        n = 0
        while not stop.wait(0.2):
            with lock:
                producer.produce(names.transactions,
                                 txn_value(f"bg{n}", f"bg{n}", 100_000 + n, BERLIN))
                producer.poll(0)
            n += 1

    spark = build_session("local[5]", "savepoint-realtime-worker", kafka_connector=True)

    def config(step: int, **changes: object) -> RealtimeConfig:
        return RealtimeConfig(bootstrap, str(workdir / f"cp-{step}"), topics=names,
                              checkpoint_interval="5 seconds", **changes)  # type: ignore[arg-type]

    lower = Thresholds(velocity_count=4)
    produce(0)
    traffic = threading.Thread(target=background, daemon=True)
    traffic.start()
    query = start(spark, config(1))
    try:
        wait("commit of phase 0", lambda: committed_transactions(
            workdir / "cp-1", names.transactions) >= len(PHASES[0]), query)
        manifest = create(spark, workdir / "cp-1", workdir / "sp-running")
        say(f"savepoint running {manifest.batch_id} "
            f"{sum(op.keys for op in manifest.operators)}")
        produce(1)
        wait("phase 1's output", readable(bootstrap, names, {"b1"}, dead=1), query)
        query.stop()

        query = start(spark, config(2, thresholds=lower,
                                    from_savepoint=str(workdir / "sp-running")))
        wait("a commit", lambda: committed_transactions(workdir / "cp-2", names.transactions)
             > 0, query)
        produce(2)
        wait("phase 2's alerts", readable(bootstrap, names, {"b1", "c0", "c2"}, dead=1), query)
        query.stop()
        say(f"skipped {skipped(spark)}")
        manifest = create(spark, workdir / "cp-2", workdir / "sp-stopped")
        say(f"savepoint stopped {manifest.batch_id} "
            f"{sum(op.keys for op in manifest.operators)} "
            f"{manifest.sources[0][names.transactions]['0']}")

        spark.conf.set("spark.sql.shuffle.partitions", "3")
        query = start(spark, config(3, thresholds=lower,
                                    from_savepoint=str(workdir / "sp-stopped")))
        produce(3)
        wait("phase 3's alert", readable(bootstrap, names, {"b1", "c0", "c2", "d1"}, dead=1),
             query)
        query.stop()
        say(f"done {skipped(spark)}")
    except Failed as e:
        say(f"failed {e}")
    finally:
        stop.set()
        traffic.join()


if __name__ == "__main__":
    main()
