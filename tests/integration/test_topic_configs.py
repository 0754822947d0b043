"""Topic configs through real admin clients and the CLI: a wrong name or value gets
INVALID_CONFIG with a clear message (CreateTopics, AlterConfigs, IncrementalAlterConfigs),
DescribeConfigs reports sources and synonyms, list configs take APPEND/SUBTRACT, and the
configs with effect on produce (max.message.bytes, message.timestamp.type, keys in
compacted topics) behave as in Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import InvalidConfigurationError
from kafka.protocol.admin import DescribeConfigsRequest

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.rawclient import RawClient
from tests.integration.test_cli import cli, failed, ok, table_rows

BAD_CONFIGS = [
    ({"retention.ms": "abc"}, "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
    ({"retention.ms": "-2"}, "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ({"segment.bytes": "99999999999"}, "Not a number of type INT"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "Value must be no more than 1"),
    ({"cleanup.policy": "compact,forever"}, "'forever' is not one of: compact, delete"),
    ({"message.timestamp.type": "BrokerTime"}, "String must be one of: CreateTime, LogAppendTime"),
    ({"unclean.leader.election.enable": "maybe"}, "Expected value to be either true or false"),
    ({"retention.msec": "1000"}, "Unknown topic config name: retention.msec"),
]


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    # Broker-wide defaults, reported as the broker's source for the topic configs.
    with EmbeddedBroker(extra_args=["-c", "log.retention.ms=3600000",
                                    "-c", "log.cleaner.delete.retention.ms=5000"]) as b:
        yield b


def admin(broker: EmbeddedBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def create(broker: EmbeddedBroker, topic: str, **configs: str) -> None:
    client = admin(broker)  # kept alive until the answer: dropping it cancels the request
    client.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(scaled(10))


def describe(broker: EmbeddedBroker, topic: str) -> dict[str, ConfigEntry]:
    client = admin(broker)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    result: dict[str, ConfigEntry] = client.describe_configs([resource])[resource].result(
        scaled(10))
    return result


def incremental(broker: EmbeddedBroker, topic: str, *ops: tuple[str, str, AlterConfigOpType]) -> None:
    client = admin(broker)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops])
    client.incremental_alter_configs([resource])[resource].result(scaled(10))


@pytest.mark.parametrize(("configs", "message"), BAD_CONFIGS)
def test_invalid_config_on_create_and_alter(broker: EmbeddedBroker, topic_name: str,
                                            configs: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaException) as e:
        create(broker, topic_name, **configs)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert message in e.value.args[0].str()
    create(broker, topic_name)
    (name, value), = configs.items()
    with pytest.raises(KafkaException) as e:
        incremental(broker, topic_name, (name, value, AlterConfigOpType.SET))
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert message in e.value.args[0].str()
    # The legacy AlterConfigs too (through kafka-python); nothing changed.
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        if not message.startswith("Unknown"):  # kafka-python refuses those itself
            answer = kp.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic_name,
                                                        configs={name: value})])
            assert message in answer["topic"][topic_name]
            assert "[Error 40] InvalidConfigurationError" in answer["topic"][topic_name]
        with pytest.raises(InvalidConfigurationError, match="error_code=40"):
            kp.create_topics([KpNewTopic(topic_name + "-kp", 1, 1, topic_configs=configs)])
    finally:
        kp.close()
    assert all(c.source == ConfigSource.DEFAULT_CONFIG.value or c.name == "retention.ms"
               or c.name == "delete.retention.ms" for c in describe(broker, topic_name).values())


def test_sources_synonyms_and_list_operations(broker: EmbeddedBroker, topic_name: str) -> None:
    create(broker, topic_name, **{"segment.bytes": "1048576"})
    configs = describe(broker, topic_name)
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == (
        "1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "3600000", ConfigSource.STATIC_BROKER_CONFIG.value)
    # Synonyms: the broker setting, then Kafka's default (the same broker name, so
    # confluent-kafka's dict keeps the last); kafka-python shows the whole chain.
    assert "log.retention.ms" in configs["retention.ms"].synonyms
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=topic_name, configuration_keys=["retention.ms"])
    with RawClient(broker.bootstrap_servers) as raw:
        answer = raw.request(DescribeConfigsRequest(resources=[resource], include_synonyms=True,
                                                    include_documentation=True), version=4)
    (entry,) = answer.results[0].configs
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.ms", "3600000", 4), ("log.retention.ms", "604800000", 5)]
    assert entry.config_type == 5  # LONG
    assert "delete segments" in entry.documentation
    assert (configs["max.message.bytes"].value, configs["max.message.bytes"].source) == (
        "1048588", ConfigSource.DEFAULT_CONFIG.value)
    assert configs["delete.retention.ms"].value == "5000"
    assert configs["min.cleanable.dirty.ratio"].value == "0.5"
    incremental(broker, topic_name, ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
                ("segment.bytes", "", AlterConfigOpType.DELETE))
    configs = describe(broker, topic_name)
    assert configs["cleanup.policy"].value == "compact,delete"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    incremental(broker, topic_name, ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert describe(broker, topic_name)["cleanup.policy"].value == "compact"
    with pytest.raises(KafkaException) as e:  # would leave no policy at all
        incremental(broker, topic_name, ("cleanup.policy", "compact", AlterConfigOpType.SUBTRACT))
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as e:
        incremental(broker, topic_name, ("retention.ms", "5", AlterConfigOpType.APPEND))
    assert "only valid for list configs" in e.value.args[0].str()


def test_cli_alter_config(broker: EmbeddedBroker, topic_name: str) -> None:
    servers = broker.bootstrap_servers
    ok(cli("topics", "create", topic_name, "-c", "segment.ms=600000", servers=servers))
    err = failed(cli("topics", "alter-config", topic_name, "--set", "retention.ms=abc",
                     servers=servers))
    assert "Invalid value abc for configuration retention.ms: Not a number of type LONG" in err
    err = failed(cli("topics", "alter-config", topic_name, "--set", "retention.msec=1",
                     servers=servers))
    assert "Unknown topic config name: retention.msec" in err
    err = failed(cli("topics", "create", topic_name + "-x", "-c", "cleanup.policy=bogus",
                     servers=servers))
    assert "'bogus' is not one of: compact, delete" in err
    assert "nothing to change" in failed(cli("topics", "alter-config", topic_name,
                                             servers=servers), code=2)
    out = ok(cli("topics", "alter-config", topic_name, "--set", "retention.ms=60000",
                 "--set", "max.message.bytes=2000", "--delete", "segment.ms",
                 "--append", "cleanup.policy=compact", servers=servers)).stdout
    assert f"Altered 4 configs of topic {topic_name}" in out
    rows = table_rows(ok(cli("topics", "describe", topic_name, servers=servers)).stdout)
    configs = {row[0]: row[1:] for row in rows if len(row) == 3}
    assert configs["retention.ms"] == ["60000", "topic"]
    assert configs["max.message.bytes"] == ["2000", "topic"]
    assert configs["segment.ms"] == ["604800000", "default"]
    assert configs["cleanup.policy"] == ["compact,delete", "topic"]
    assert configs["delete.retention.ms"] == ["5000", "broker"]


def produce_result(broker: EmbeddedBroker, topic: str, key: bytes | None, value: bytes,
                   timestamp: int = 0) -> tuple[KafkaError | None, object]:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "retries": 0})
    result: list[tuple[KafkaError | None, object]] = []
    producer.produce(topic, key=key, value=value, timestamp=timestamp,
                     on_delivery=lambda err, msg: result.append((err, msg)))
    producer.flush(scaled(10))
    return result[0]


def test_max_message_bytes(broker: EmbeddedBroker, topic_name: str) -> None:
    create(broker, topic_name, **{"max.message.bytes": "1000"})
    err, _ = produce_result(broker, topic_name, b"k", b"x" * 2000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    err, _ = produce_result(broker, topic_name, b"k", b"x" * 500)
    assert err is None


def test_compacted_topic_refuses_records_without_key(broker: EmbeddedBroker,
                                                     topic_name: str) -> None:
    create(broker, topic_name, **{"cleanup.policy": "compact"})
    err, _ = produce_result(broker, topic_name, None, b"no key")
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    err, _ = produce_result(broker, topic_name, b"key", b"value")
    assert err is None


def test_log_append_time(broker: EmbeddedBroker, topic_name: str) -> None:
    create(broker, topic_name, **{"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    err, msg = produce_result(broker, topic_name, b"k", b"v", timestamp=1_000_000)
    after = int(time.time() * 1000)
    assert err is None
    kind, ts = msg.timestamp()  # type: ignore[attr-defined]
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "lat"})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    got = consumer.poll(scaled(10))
    consumer.close()
    assert got is not None and got.error() is None
    assert got.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, ts)
    kp = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest")
    kp.assign([KpTopicPartition(topic_name, 0)])
    records = []
    deadline = time.monotonic() + scaled(10)
    while not records and time.monotonic() < deadline:
        for batch in kp.poll(timeout_ms=200).values():
            records += batch
    kp.close()
    assert [(r.timestamp_type, r.timestamp) for r in records] == [(1, ts)]
