"""Produce and fetch, the same records through confluent-kafka and kafka-python into
Apache Kafka and headrace: the offsets each producer is told, every record read back
(offset, key, value, headers, timestamp), the high watermark and the log start offset."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from headrace.testing import scaled
from tests.compat.clients import confluent_produce, kafka_python_consume, kafka_python_produce
from tests.compat.records import CODECS, Record, body
from tests.differential.conftest import Brokers
from tests.differential.support import create_topic, read_partition, watermarks
from tests.differential.test_errors import fetch
from tests.integration.rawclient import RawClient

# Recent timestamps, the same for both brokers: Apache Kafka deletes records older than
# retention.ms (7 days) even from the active segment, headrace does not (see
# test_retention.py), and that is not what this module compares.
BASE_TIMESTAMP_MS = int(time.time() * 1000) // 1000 * 1000 - 60_000


def records(tag: str) -> list[Record]:
    """Keyed, null-key, empty, tombstone and header edge cases, explicit timestamps."""
    out = []
    for i in range(40):
        ts = BASE_TIMESTAMP_MS + i
        kind = i % 5
        if kind == 0:
            out.append(Record(f"k{i}".encode(), body(f"{tag}-{i}"), (), 0, ts))
        elif kind == 1:
            out.append(Record(None, body(f"{tag}-{i}"), (), 0, ts))
        elif kind == 2:
            out.append(Record(f"k{i}".encode(), None, (("h", b"tomb"),), 0, ts))
        elif kind == 3:
            out.append(Record(b"", b"", (("a", b"1"), ("a", b"2"), ("empty", b"")), 0, ts))
        else:
            out.append(Record(bytes([0, 255, i]), body(f"{tag}-{i}"),
                              (("pad", b"padding " * 16), ("\u00e9", b"\x00\x01")), 0, ts))
    return out


def observe(bootstrap: str, topic: str, producer: str, codec: str) -> object:
    create_topic(bootstrap, topic)
    produce = confluent_produce if producer == "confluent" else kafka_python_produce
    first = produce(bootstrap, topic, records("a"), codec)
    second = produce(bootstrap, topic, records("b"), codec)
    rows = read_partition(bootstrap, topic)
    consumed = kafka_python_consume(bootstrap, topic, [0])
    return {
        "delivered": [(d.partition, d.offset) for d in first + second],
        "rows": rows,
        "kafka_python_rows": [(c.offset, c.key, c.value, c.headers, c.timestamp_ms)
                              for c in consumed],
        "watermarks": watermarks(bootstrap, topic),
    }


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", ["confluent", "kafka_python"])
def test_produce_and_fetch_match(brokers: Brokers, topic_name: str, producer: str,
                                 codec: str) -> None:
    reference = observe(brokers.kafka, topic_name, producer, codec)
    ours = observe(brokers.headrace, topic_name, producer, codec)
    assert ours == reference
    assert reference["watermarks"] == (0, 80)  # type: ignore[index]


def observe_log_start(bootstrap: str, topic: str) -> object:
    create_topic(bootstrap, topic)
    confluent_produce(bootstrap, topic, [Record(b"k", f"v{i}".encode(), (), 0, BASE_TIMESTAMP_MS)
                                         for i in range(10)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0, 4)
    deleted = admin.delete_records([tp])[tp].result(scaled(10))
    with RawClient(bootstrap) as c:
        below_start = fetch(c, topic, 2)
    return {
        "deleted_low_watermark": deleted.low_watermark,
        "watermarks": watermarks(bootstrap, topic),
        "rows": [(o, v) for o, _, v, _, _ in read_partition(bootstrap, topic)],
        "fetch_below_start": below_start,
    }


def test_log_start_offset_matches(brokers: Brokers, topic_name: str) -> None:
    reference = observe_log_start(brokers.kafka, topic_name)
    ours = observe_log_start(brokers.headrace, topic_name)
    assert ours == reference
    assert reference == {"deleted_low_watermark": 4, "watermarks": (4, 10),
                         "rows": [(i, f"v{i}".encode()) for i in range(4, 10)],
                         "fetch_below_start": (1, -1)}
