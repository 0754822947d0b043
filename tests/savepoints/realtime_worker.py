"""Worker for the real-time path's savepoint test: the fraud query in Real-Time Mode
stopped with a savepoint, then started from it with a changed rule set, in one Spark
application (``local[4]``: 2 one-partition topics + 2 shuffle partitions).

``python -m tests.savepoints.realtime_worker BOOTSTRAP WORKDIR PREFIX INPUT``: runs the query
(topics ``PREFIX-transactions`` etc., checkpoint ``WORKDIR/cp-before``, the detector's
thresholds) until a committed batch has read ``INPUT`` transactions, stops it, writes the
savepoint ``WORKDIR/savepoint`` (says ``savepoint <keys>``), then starts the query from it
with ``velocity_count`` lowered to 4 (checkpoint ``WORKDIR/cp-after``; says ``started``) and
says ``committed <n>`` each time its committed batches have read ``n`` transactions.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from headrace.pipelines.fraud.pipeline import PipelineTopics
from headrace.pipelines.fraud.realtime import RealtimeConfig, start
from headrace.pipelines.fraud.rules import Thresholds
from headrace.savepoints import SavepointError, create
from headrace.savepoints.checkpoint import committed_batch
from tests.spark.spark_workers.common import build_session, say


def topics(prefix: str) -> PipelineTopics:
    return PipelineTopics(transactions=f"{prefix}-transactions", profiles=f"{prefix}-profiles",
                          alerts=f"{prefix}-alerts", late=f"{prefix}-late",
                          dead_letters=f"{prefix}-dlq")


def committed_transactions(checkpoint: Path, topic: str) -> int:
    """Transactions read by the query's committed batches (0 before the first commit)."""
    try:
        batch = committed_batch(checkpoint)
    except SavepointError:
        return 0
    return sum(sum(int(o) for o in (source or {}).get(topic, {}).values())
               for source in batch.sources)


def main() -> None:
    bootstrap, workdir, prefix, wanted = sys.argv[1], Path(sys.argv[2]), sys.argv[3], \
        int(sys.argv[4])
    spark = build_session("local[4]", "savepoint-realtime-worker", kafka_connector=True)
    names = topics(prefix)
    before = workdir / "cp-before"
    query = start(spark, RealtimeConfig(bootstrap, str(before), topics=names,
                                        checkpoint_interval="5 seconds"))
    say("running")
    while committed_transactions(before, names.transactions) < wanted:
        if not query.isActive:
            say(f"failed {query.exception()}")
            return
        time.sleep(0.2)
    query.stop()
    manifest = create(spark, before, workdir / "savepoint")
    say(f"savepoint {sum(op.keys for op in manifest.operators)}")
    after = workdir / "cp-after"
    query = start(spark, RealtimeConfig(bootstrap, str(after), topics=names,
                                        checkpoint_interval="5 seconds",
                                        thresholds=Thresholds(velocity_count=4),
                                        from_savepoint=str(workdir / "savepoint")))
    say("started")
    said = -1
    while query.isActive:
        n = committed_transactions(after, names.transactions)
        if n != said:
            said = n
            say(f"committed {n}")
        time.sleep(0.2)
    say(f"failed {query.exception()}")


if __name__ == "__main__":
    main()
