"""Worker for the kill -9 test: runs the fraud pipeline with availableNow on a checkpoint.

``python -m tests.pipelines.fraud_worker BOOTSTRAP CHECKPOINT [MAX_OFFSETS]``
(``maxOffsetsPerTrigger``, 300 unless given); says ``started`` once the query runs and
``done`` when it has read everything.
"""

from __future__ import annotations

import sys

from headrace.pipelines.fraud.pipeline import PipelineConfig, start
from headrace.streaming import configure
from tests.spark.spark_workers.common import build_session, say


def main() -> None:
    bootstrap, checkpoint = sys.argv[1], sys.argv[2]
    max_offsets = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    spark = build_session("local[2]", "fraud-worker")
    configure(spark)
    query = start(spark, PipelineConfig(bootstrap, checkpoint,
                                        max_offsets_per_trigger=max_offsets,
                                        available_now=True))
    say("started")
    query.awaitTermination()
    say("done")


if __name__ == "__main__":
    main()
