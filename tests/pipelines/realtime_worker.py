"""Worker for the real-time path's tests: the fraud query in Real-Time Mode on a session of
its own (``local[8]``: 5 source partitions + 2 shuffle partitions need 7 task slots).

``python -m tests.pipelines.realtime_worker BOOTSTRAP CHECKPOINT INTERVAL``; says ``started``
once the query runs, then ``progress <json>`` with the source end offsets (per topic, summed
over partitions) at each checkpoint, ``skipped <n>`` when the exactly-once sink has skipped
``n`` alerts in all as already committed (replays), and ``failed <error>`` if the query dies.
"""

from __future__ import annotations

import sys
import time

from headrace.pipelines.fraud.realtime import RealtimeConfig, start
from tests.spark.spark_workers.common import build_session, say, say_progress


def main() -> None:
    bootstrap, checkpoint, interval = sys.argv[1], sys.argv[2], sys.argv[3]
    spark = build_session("local[8]", "fraud-realtime-worker", kafka_connector=True)
    query = start(spark, RealtimeConfig(bootstrap, checkpoint, checkpoint_interval=interval))
    say("started")
    seen = -1
    said_skipped = 0
    while query.isActive:
        seen = say_progress(query, seen)
        jvm_view = spark.sparkContext._jvm
        assert jvm_view is not None
        skipped = int(jvm_view.io.headrace.realtime.ExactlyOnceKafkaWriter.counters()[1])
        if skipped != said_skipped:
            said_skipped = skipped
            say(f"skipped {skipped}")
        time.sleep(0.2)
    say(f"failed {query.exception()}")


if __name__ == "__main__":
    main()
