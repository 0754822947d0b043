"""Worker for the real-time path on the clusters: the fraud query in Real-Time Mode
(``headrace.pipelines.fraud.realtime``: the JVM rule operator, the exactly-once JVM sink),
an application on a Spark standalone master.

``python -m tests.cluster.realtime_worker MASTER BOOTSTRAP CHECKPOINT PREFIX [INTERVAL]``
(the checkpoint interval, 5 s unless given): topics
``PREFIX-transactions``, ``-profiles``, ``-alerts``, ``-dlq``. Real-Time Mode schedules
every task of the query's stages at once (5 source partitions + 2 shuffle partitions: 7),
so the application asks for one executor of 4 cores on each of the two workers (8 task
slots; ``headrace cluster up`` has each worker offer 4). Serves the query's pipeline
metrics (``headrace.spark.metrics``, with the cluster for lag and dead letters) and says
``metrics <url>``, then ``started``, ``progress <json>`` (source end offsets per topic at
each checkpoint) and ``failed <error>``, as ``tests.pipelines.realtime_worker`` does.
"""

from __future__ import annotations

import sys
import time

from headrace.pipelines.fraud.pipeline import PipelineTopics
from headrace.pipelines.fraud.realtime import RealtimeConfig, start
from headrace.spark.metrics import serve_pipeline_metrics
from tests.spark.spark_workers.common import build_session, say, say_progress

QUERY = "fraud-realtime"


def topics(prefix: str) -> PipelineTopics:
    return PipelineTopics(transactions=f"{prefix}-transactions", profiles=f"{prefix}-profiles",
                          alerts=f"{prefix}-alerts", dead_letters=f"{prefix}-dlq")


def main() -> None:
    master, bootstrap, checkpoint, prefix = sys.argv[1:5]
    interval = sys.argv[5] if len(sys.argv) > 5 else "5 seconds"
    spark = build_session(master, "fraud-realtime-cluster", kafka_connector=True,
                          executor_cores=4, executor_memory="768m")
    names = topics(prefix)
    _listener, url = serve_pipeline_metrics(spark, bootstrap_servers=bootstrap,
                                            dead_letter_topics={QUERY: names.dead_letters})
    say(f"metrics {url}")
    query = start(spark, RealtimeConfig(bootstrap, checkpoint, topics=names,
                                        checkpoint_interval=interval), query_name=QUERY)
    say("started")
    seen = -1
    while query.isActive:
        seen = say_progress(query, seen)
        time.sleep(0.2)
    say(f"failed {query.exception()}")


if __name__ == "__main__":
    main()
