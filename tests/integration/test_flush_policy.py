"""Every topic config Apache Kafka 4.3 describes is accepted and described here, and the
flush policy configs are honoured: ``flush.messages=N`` fsyncs a partition once N messages
are unflushed, ``flush.ms=T`` at most T ms after an unflushed append, and neither set
(Kafka's default, Long.MAX) leaves the log to the page cache. The fsyncs are observed in the
broker's own log (``--log-level debug``: one "flushed <topic>-<partition>" line per fsync).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigSource

from headrace.storage.config import LONG_MAX
from headrace.testing import EmbeddedBroker, scaled
from tests.integration.test_topic_configs import create, describe, incremental

# Apache Kafka 4.3.1's DescribeConfigs for a fresh topic (headrace.testing.ApacheKafka),
# name -> default value.
KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete", "compression.gzip.level": "-1", "compression.lz4.level": "9",
    "compression.type": "producer", "compression.zstd.level": "3",
    "delete.retention.ms": "86400000", "file.delete.delay.ms": "60000",
    "flush.messages": str(LONG_MAX), "flush.ms": str(LONG_MAX),
    "follower.replication.throttled.replicas": "", "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "", "local.retention.bytes": "-2",
    "local.retention.ms": "-2", "max.compaction.lag.ms": str(LONG_MAX),
    "max.message.bytes": "1048588", "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": str(LONG_MAX), "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1", "preallocate": "false", "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false", "remote.storage.enable": "false",
    "retention.bytes": "-1", "retention.ms": "604800000", "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760", "segment.jitter.ms": "0", "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=["--log-level", "debug"]) as b:
        yield b


def fsyncs(broker: EmbeddedBroker, topic: str) -> int:
    return sum(f"flushed {topic}-0 " in line for line in broker.output_lines())


def fsyncs_reach(broker: EmbeddedBroker, topic: str, n: int) -> int:
    """The fsyncs once ``n`` of them were said, or after a few seconds: the broker says one
    before it acknowledges the produce, but this process reads the broker's output on a
    thread of its own, which may not have read the last line yet."""
    deadline = time.monotonic() + scaled(5)
    while fsyncs(broker, topic) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return fsyncs(broker, topic)


def produce_one_by_one(broker: EmbeddedBroker, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i)
        assert producer.flush(scaled(10)) == 0  # one request, one acknowledged message at a time


def test_every_kafka_topic_config_is_described(broker: EmbeddedBroker, topic_name: str) -> None:
    create(broker, topic_name)
    configs = describe(broker, topic_name)
    for name, default in KAFKA_TOPIC_DEFAULTS.items():
        assert name in configs, name
        assert configs[name].value == default, name
        assert configs[name].source == ConfigSource.DEFAULT_CONFIG.value, name


def test_kafka_topic_configs_accepted_and_validated(broker: EmbeddedBroker,
                                                    topic_name: str) -> None:
    create(broker, topic_name, **{"flush.messages": "5", "flush.ms": "1000",
                                  "compression.zstd.level": "10", "preallocate": "true",
                                  "leader.replication.throttled.replicas": "*"})
    incremental(broker, topic_name, ("segment.jitter.ms", "100", AlterConfigOpType.SET),
                ("local.retention.ms", "-2", AlterConfigOpType.SET))
    configs = describe(broker, topic_name)
    for name, value in [("flush.messages", "5"), ("flush.ms", "1000"),
                        ("compression.zstd.level", "10"), ("preallocate", "true"),
                        ("leader.replication.throttled.replicas", "*"),
                        ("segment.jitter.ms", "100")]:
        assert configs[name].value == value, name
        assert configs[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
    # Kafka's own wording (checked against ApacheKafka) for values out of range.
    for name, raw, message in [
        ("flush.messages", "0", "Invalid value 0 for configuration flush.messages: "
         "Value must be at least 1"),
        ("flush.ms", "-1", "Invalid value -1 for configuration flush.ms: Value must be at least 0"),
        ("compression.gzip.level", "0", "Invalid value 0 for configuration "
         "compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
        ("leader.replication.throttled.replicas", "x", "Invalid value [x] for configuration "
         "leader.replication.throttled.replicas: leader.replication.throttled.replicas must be"),
        ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the "
         "broker. Topic cannot be configured with remote log storage."),
    ]:
        with pytest.raises(KafkaException) as info:
            incremental(broker, topic_name, (name, raw, AlterConfigOpType.SET))
        assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert message in str(info.value)


def test_flush_messages_fsyncs_every_n_messages(broker: EmbeddedBroker, topic_name: str) -> None:
    create(broker, topic_name, **{"flush.messages": "1"})
    produce_one_by_one(broker, topic_name, 3)
    assert fsyncs_reach(broker, topic_name, 3) == 3

    incremental(broker, topic_name, ("flush.messages", "2", AlterConfigOpType.SET))
    produce_one_by_one(broker, topic_name, 4)
    assert fsyncs_reach(broker, topic_name, 5) == 5


def test_no_flush_config_leaves_the_page_cache(broker: EmbeddedBroker, topic_name: str) -> None:
    create(broker, topic_name)
    produce_one_by_one(broker, topic_name, 3)
    time.sleep(0.5)
    assert fsyncs(broker, topic_name) == 0


def test_flush_ms_fsyncs_after_the_interval(broker: EmbeddedBroker, topic_name: str) -> None:
    create(broker, topic_name, **{"flush.ms": "200"})
    produce_one_by_one(broker, topic_name, 3)  # within one interval: one timer, one fsync
    deadline = time.monotonic() + scaled(10)
    while fsyncs(broker, topic_name) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fsyncs(broker, topic_name) >= 1
