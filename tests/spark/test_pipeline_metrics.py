"""Pipeline metrics: a streaming query's progress, exported for Prometheus by a listener."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from headrace.spark.metrics import serve_pipeline_metrics
from headrace.testing import ConsoleProcess, EmbeddedBroker, scaled
from tests.spark.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.spark


def scrape(url: str) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(url, timeout=scaled(10)) as r:
        text = r.read().decode()
    return {(s.name, s.labels.get("query", "")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def lag_of(url: str, query: str) -> dict[tuple[str, str], float]:
    """``headrace_pipeline_source_lag_records`` of ``query``: (topic, partition) -> lag."""
    with urllib.request.urlopen(url, timeout=scaled(10)) as r:
        text = r.read().decode()
    return {(s.labels["topic"], s.labels["partition"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "headrace_pipeline_source_lag_records" and s.labels["query"] == query}


def test_progress_of_a_windowed_query_is_exported(spark: SparkSession, broker: EmbeddedBroker,
                                                  topic_name: str, tmp_path: Path) -> None:
    create_topic(broker.bootstrap_servers, topic_name, 2)
    base = 1_700_000_000_000
    # 200 on-time events, then 5 an hour late once the watermark has moved on.
    events = [(f"k{i % 7}", {"ts": base + i * 1000}) for i in range(200)]
    produce(broker.bootstrap_servers, topic_name,
            [(k.encode(), json.dumps(v).encode()) for k, v in events])
    dlq = f"{topic_name}-dlq"
    create_topic(broker.bootstrap_servers, dlq)
    produce(broker.bootstrap_servers, dlq, [(b"bad", b"not json")] * 3)
    listener, url = serve_pipeline_metrics(spark, dead_letter_topics={"metered-counts": dlq},
                                           bootstrap_servers=broker.bootstrap_servers)
    try:
        counts = (spark.readStream.format("headrace")
                  .option("kafka.bootstrap.servers", broker.bootstrap_servers)
                  .option("subscribe", topic_name).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "100").load()
                  .select(F.timestamp_millis(F.get_json_object(F.col("value").cast("string"),
                                                               "$.ts").cast("long")).alias("ts"))
                  .withWatermark("ts", "10 seconds")
                  .groupBy(F.window("ts", "1 minute")).count())
        query = (counts.writeStream.format("noop").queryName("metered-counts")
                 .outputMode("append").option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(scaled(120))
        produce(broker.bootstrap_servers, topic_name,
                [(b"late", json.dumps({"ts": base - 3_600_000 - i * 120_000}).encode())
                 for i in range(5)])  # five windows: Spark counts rows after partial aggregation
        query = (counts.writeStream.format("noop").queryName("metered-counts")
                 .outputMode("append").option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(scaled(120))
        # Progress events reach the listener asynchronously.
        deadline = time.monotonic() + scaled(30)
        while time.monotonic() < deadline:
            s = scrape(url)
            if s.get(("headrace_pipeline_input_rows_total", "metered-counts")) == 205 and \
                    s.get(("headrace_pipeline_active", "metered-counts")) == 0:
                break
            time.sleep(0.2)
        assert s[("headrace_pipeline_input_rows_total", "metered-counts")] == 205
        assert s[("headrace_pipeline_late_rows_total", "metered-counts")] == 5
        assert s[("headrace_pipeline_dead_letters_total", "metered-counts")] == 3
        assert s[("headrace_pipeline_batches_total", "metered-counts")] >= 3
        assert s[("headrace_pipeline_batch_duration_seconds", "metered-counts")] > 0
        assert s[("headrace_pipeline_state_rows", "metered-counts")] >= 1
        assert s[("headrace_pipeline_state_memory_bytes", "metered-counts")] > 0
        # Both source partitions read to their end: lag 0 each, asked of the broker.
        assert lag_of(url, "metered-counts") == {(topic_name, "0"): 0, (topic_name, "1"): 0}
        produce(broker.bootstrap_servers, topic_name,
                [(b"k", json.dumps({"ts": base}).encode(), p) for p in (0, 1, 1)])
        assert lag_of(url, "metered-counts") == {(topic_name, "0"): 1, (topic_name, "1"): 2}
        # The watermark is event time (2023) far behind the wall clock.
        assert s[("headrace_pipeline_watermark_delay_seconds", "metered-counts")] > 86_400
        # The console plots them.
        with ConsoleProcess(broker.bootstrap_servers, pipeline_metrics=[url],
                            sample_seconds=0.3) as web:
            deadline = time.monotonic() + scaled(20)
            while True:
                with urllib.request.urlopen(f"{web.url}/pipelines", timeout=scaled(10)) as r:
                    html = r.read().decode()
                if html.count("<polyline") >= 3 or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
        assert 'id="pipeline-metered-counts"' in html and "late rows 5" in html
        assert html.count("<polyline") >= 3
    finally:
        spark.streams.removeListener(listener)
