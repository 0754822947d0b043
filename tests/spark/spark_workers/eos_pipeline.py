"""A streaming query from one topic to another through the exactly-once sink, for the
kill -9 test (``tests/spark/test_exactly_once_crash.py``).

Run from the repository root::

    python -m tests.spark.spark_workers.eos_pipeline --bootstrap HOST:PORT --input A \\
        --output B --checkpoint DIR [--max-offsets 1000] [--delivery exactly-once]

The query reads ``A`` from the earliest offset (``maxOffsetsPerTrigger`` per
micro-batch), upper-cases the values, ``repartition(3)``s (so the sink's partitions are
not the source's) and writes to ``B`` with ``format("headrace")``, checkpointing in
``DIR``, under ``Trigger.AvailableNow``: it ends once everything in ``A`` when it started
is written. Restarted on the same ``DIR``, it resumes from the checkpoint.

Progress lines on stdout (see ``common.say``): ``session`` once the SparkSession is up,
``started <query id>`` after ``start()``, ``batch <id> <rows>`` after each
micro-batch, ``done <batches>`` when the query ended, then
it exits 0. Any failure exits non-zero with a traceback on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql.streaming import StreamingQueryListener

from headrace.spark.checkpoint import discard_unfinished_first_batch
from tests.spark.spark_workers.common import build_session, say

SINK_PARTITIONS = 3


class Progress(StreamingQueryListener):
    """Says ``batch <id> <rows>`` when a micro-batch has committed (asynchronously: the
    listener bus may say it a little after the fact)."""

    def onQueryStarted(self, event: object) -> None:
        pass

    def onQueryProgress(self, event: object) -> None:
        progress = event.progress  # type: ignore[attr-defined]
        say(f"batch {progress.batchId} {progress.numInputRows}")

    def onQueryIdle(self, event: object) -> None:
        pass

    def onQueryTerminated(self, event: object) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--max-offsets", type=int, default=1000)
    ap.add_argument("--delivery", default="exactly-once")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)

    spark = build_session(args.master, "headrace-eos-pipeline")
    spark.streams.addListener(Progress())
    say("session")
    # The killed incarnations may have crashed inside the first offsets write.
    discard_unfinished_first_batch(args.checkpoint)
    query = (spark.readStream.format("headrace")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("subscribe", args.input)
             .option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(args.max_offsets))
             .load()
             .selectExpr("key", "upper(cast(value as string)) as value")
             .repartition(SINK_PARTITIONS)
             .writeStream.format("headrace")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("topic", args.output)
             .option("delivery", args.delivery)
             .option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True)
             .start())
    say(f"started {query.id}")
    query.awaitTermination()
    say(f"done {len(query.recentProgress)}")
    spark.stop()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
