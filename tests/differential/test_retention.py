"""Time-based retention on both brokers, where they differ on purpose: Apache Kafka rolls
and deletes an active segment whose records are all past ``retention.ms``; headrace only
deletes non-active segments (see "Differences from Apache Kafka" in COMPATIBILITY.md)."""

from __future__ import annotations

import time

from tests.compat.clients import confluent_produce
from tests.compat.records import Record
from tests.differential.conftest import Brokers
from tests.differential.support import create_topic, poll_until, read_partition, watermarks

SEGMENT_MS = 300
OLD_MS = 1_700_000_000_000  # 2023: far past retention.ms
CONFIGS = {"retention.ms": "60000", "segment.ms": str(SEGMENT_MS)}


def produce_old(bootstrap: str, topic: str) -> None:
    """Two batches of old records in two segments (the second one is the active one)."""
    create_topic(bootstrap, topic, configs=CONFIGS)
    confluent_produce(bootstrap, topic, [Record(b"k", b"first", (), 0, OLD_MS)])
    time.sleep(SEGMENT_MS / 1000 + 0.1)  # segment.ms is wall-clock: the next append rolls
    confluent_produce(bootstrap, topic, [Record(b"k", b"second", (), 0, OLD_MS + 1)])


def test_expired_active_segment(brokers: Brokers, topic_name: str) -> None:
    produce_old(brokers.kafka, topic_name)
    produce_old(brokers.headrace, topic_name)
    # Kafka: everything goes, the active segment too; the log is empty at its end.
    assert poll_until("Kafka retention", lambda: watermarks(
        brokers.kafka, topic_name) == (2, 2), interval=0.2) is True
    assert read_partition(brokers.kafka, topic_name) == []
    # headrace: the rolled segment goes, the active one stays (documented difference).
    assert poll_until("headrace retention", lambda: watermarks(
        brokers.headrace, topic_name) == (1, 2), interval=0.2) is True
    assert [(o, v) for o, _, v, _, _ in read_partition(brokers.headrace, topic_name)] == [
        (1, b"second")]
