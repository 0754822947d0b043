"""kafka-python against the real broker: produce, consume, admin, offsets.

kafka-python's producer is idempotent by default (InitProducerId, sequence numbers), so
every produce test here also exercises that path. Header values must be bytes: the client
refuses None before anything reaches the broker. Consumers use assign + seek, no group.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec
from kafka.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from headrace.testing import EmbeddedBroker, scaled
from tests.compat.clients import TIMEOUT, kafka_python_consume, kafka_python_produce
from tests.compat.records import (
    BASE_TIMESTAMP_MS,
    CODECS,
    Record,
    assert_read_back,
    big_value,
    body,
    keyed_records,
    sample_records,
)
from tests.compat.wire import assert_idempotent_batches, assert_stored_codec, stored_batches


@pytest.fixture
def admin(broker: EmbeddedBroker) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    yield client
    client.close()


@pytest.fixture
def consumer(broker: EmbeddedBroker) -> Iterator[KafkaConsumer]:
    c = KafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    yield c
    c.close()


def create(admin: KafkaAdminClient, topic: str, partitions: int, **config: str) -> None:
    admin.create_topics({topic: {"num_partitions": partitions, "configs": config}})


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(
    broker: EmbeddedBroker, admin: KafkaAdminClient, topic_name: str, codec: str
) -> None:
    create(admin, topic_name, 3)
    records = sample_records(3, null_header_values=False)

    delivered = kafka_python_produce(broker.bootstrap_servers, topic_name, records, codec)
    consumed = kafka_python_consume(broker.bootstrap_servers, topic_name, range(3))

    assert_read_back(records, consumed, delivered)
    assert_stored_codec(broker.bootstrap_servers, topic_name, range(3), codec)
    assert_idempotent_batches(broker.bootstrap_servers, topic_name, range(3))


@pytest.mark.parametrize("codec", CODECS)
def test_one_megabyte_value(
    broker: EmbeddedBroker, admin: KafkaAdminClient, topic_name: str, codec: str
) -> None:
    create(admin, topic_name, 1)
    records = [
        Record(b"big", big_value(), (("size", b"1000000"),), 0, BASE_TIMESTAMP_MS),
        Record(b"after", body("after the big one"), (), 0),
    ]

    delivered = kafka_python_produce(broker.bootstrap_servers, topic_name, records, codec)
    consumed = kafka_python_consume(broker.bootstrap_servers, topic_name, [0])

    assert_read_back(records, consumed, delivered)
    first = stored_batches(broker.bootstrap_servers, topic_name, 0)[0]
    assert (first.base_offset, first.record_count) == (0, 1)
    assert_stored_codec(broker.bootstrap_servers, topic_name, [0], codec)


def test_many_partitions_keep_per_partition_order(
    broker: EmbeddedBroker, admin: KafkaAdminClient, topic_name: str
) -> None:
    create(admin, topic_name, 32)
    records = keyed_records(320, keys=64)
    records += [Record(None, f"pinned-{p}".encode(), (), p) for p in range(32)]

    delivered = kafka_python_produce(broker.bootstrap_servers, topic_name, records, "gzip")
    consumed = kafka_python_consume(broker.bootstrap_servers, topic_name, range(32))

    assert_read_back(records, consumed, delivered)
    assert {c.partition for c in consumed} == set(range(32))
    assert len({c.partition for c in consumed if c.key is not None}) >= 16


def test_client_refuses_null_header_values(broker: EmbeddedBroker) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    try:
        with pytest.raises(TypeError):
            producer.send("never-created", value=b"v", headers=[("h", None)])
    finally:
        producer.close(scaled(TIMEOUT))


def test_admin_topic_lifecycle(
    broker: EmbeddedBroker, admin: KafkaAdminClient, topic_name: str
) -> None:
    created = admin.create_topics(
        {topic_name: {"num_partitions": 2, "configs": {"retention.ms": "123456"}}}
    )
    (topic,) = created["topics"]
    assert (
        topic["name"],
        topic["error_code"],
        topic["num_partitions"],
        topic["replication_factor"],
    ) == (topic_name, 0, 2, 1)
    assert topic["configs"]["retention.ms"]["value"] == "123456"
    with pytest.raises(TopicAlreadyExistsError):
        create(admin, topic_name, 2)

    (description,) = admin.describe_topics([topic_name])
    assert description["name"] == topic_name
    assert [
        (p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
        for p in description["partitions"]
    ] == [(0, 0, [0], [0]), (1, 0, [0], [0])]

    resource = ConfigResource(ConfigResourceType.TOPIC, topic_name)
    modified = admin.describe_configs([resource])["topic"][topic_name]
    assert {k: v["value"] for k, v in modified.items()} == {"retention.ms": "123456"}
    assert modified["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    every = admin.describe_configs([resource], config_filter="all")["topic"][topic_name]
    assert every["cleanup.policy"]["value"] == "delete"
    assert every["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"

    admin.create_partitions({topic_name: 5})
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({topic_name: 3})
    assert len(admin.describe_topics([topic_name])[0]["partitions"]) == 5
    records = [Record(b"k", body("in a new partition"), (), 4)]
    delivered = kafka_python_produce(broker.bootstrap_servers, topic_name, records)
    assert_read_back(
        records, kafka_python_consume(broker.bootstrap_servers, topic_name, [4]), delivered
    )

    deleted = admin.delete_topics([topic_name])
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [(topic_name, 0)]
    assert topic_name not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([topic_name])


def test_admin_rejects_replication_factor_above_one(
    admin: KafkaAdminClient, topic_name: str
) -> None:
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics({topic_name: {"num_partitions": 1, "replication_factor": 3}})


def test_admin_describe_broker_configs_and_cluster(
    broker: EmbeddedBroker, admin: KafkaAdminClient
) -> None:
    resource = ConfigResource(ConfigResourceType.BROKER, "0")
    configs = admin.describe_configs([resource], config_filter="all")["broker"]["0"]
    assert int(configs["message.max.bytes"]["value"]) >= 1_048_588
    # Dynamic (alterable) and unset, as Kafka 4.3 reports it.
    assert configs["message.max.bytes"]["read_only"] is False
    assert configs["message.max.bytes"]["config_source"] == "DEFAULT_CONFIG"

    cluster = admin.describe_cluster()
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    assert cluster["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (0, host, int(port))
    ]


def test_list_offsets_and_offsets_for_times(
    broker: EmbeddedBroker, admin: KafkaAdminClient, consumer: KafkaConsumer, topic_name: str
) -> None:
    create(admin, topic_name, 2)
    stamps = [BASE_TIMESTAMP_MS + 1000 * i for i in range(5)]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    try:
        for i, ts in enumerate(stamps):  # one batch per record: .get() before the next
            producer.send(topic_name, value=f"v{i}".encode(), partition=0, timestamp_ms=ts).get(
                scaled(TIMEOUT)
            )
    finally:
        producer.close(scaled(TIMEOUT))
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)

    def listed(spec: int, tp: TopicPartition = tp0) -> tuple[int, int]:
        result = admin.list_partition_offsets({tp: spec})[tp]
        return result.offset, result.timestamp

    assert listed(OffsetSpec.EARLIEST)[0] == 0
    assert listed(OffsetSpec.LATEST)[0] == 5
    assert listed(OffsetSpec.LATEST, tp1)[0] == 0
    assert listed(OffsetSpec.MAX_TIMESTAMP) == (4, stamps[4])
    assert listed(stamps[2]) == (2, stamps[2])
    assert listed(stamps[2] + 1) == (3, stamps[3])

    assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
    assert consumer.end_offsets([tp0, tp1]) == {tp0: 5, tp1: 0}
    found = consumer.offsets_for_times({tp0: stamps[3] - 500, tp1: stamps[0]})
    assert found[tp1] is None  # nothing at or after that time
    assert (found[tp0].offset, found[tp0].timestamp) == (3, stamps[3])
    assert consumer.offsets_for_times({tp0: stamps[-1] + 1})[tp0] is None

    consumer.assign([tp0])
    consumer.seek(tp0, found[tp0].offset)  # seek by time, then read from there
    batch = consumer.poll(timeout_ms=int(scaled(TIMEOUT) * 1000), max_records=1)[tp0]
    assert [(m.offset, m.value, m.timestamp) for m in batch] == [(3, b"v3", stamps[3])]
