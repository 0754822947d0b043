"""confluent-kafka (librdkafka) against the real broker: produce, consume, admin, offsets.

Consumers use manual assignment from the beginning, never a group, and commit nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from headrace.testing import EmbeddedBroker, scaled
from tests.compat.clients import TIMEOUT, confluent_consume, confluent_produce
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
from tests.compat.wire import (
    CODEC_IDS,
    assert_idempotent_batches,
    assert_stored_codec,
    stored_batches,
)
from tests.conftest import AnyBroker


@pytest.fixture
def admin(broker: EmbeddedBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


@pytest.fixture
def consumer(broker: EmbeddedBroker) -> Iterator[Consumer]:
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "headrace-compat-unused",
            "enable.auto.commit": False,
        }
    )
    yield c
    c.close()


def create(admin: AdminClient, topic: str, partitions: int, **config: str) -> None:
    futures = admin.create_topics(
        [NewTopic(topic, partitions, 1, config=config)], operation_timeout=scaled(TIMEOUT)
    )
    futures[topic].result(timeout=scaled(TIMEOUT))


def kafka_error(future: object) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=scaled(TIMEOUT))  # type: ignore[attr-defined]
    error: KafkaError = info.value.args[0]
    return error


def produce_one_batch_each(bootstrap: str, topic: str, timestamps: list[int]) -> None:
    """One record per batch (flush after each), at the given timestamps, partition 0."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, ts in enumerate(timestamps):
        producer.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=ts)
        assert producer.flush(scaled(TIMEOUT)) == 0


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(
    broker: EmbeddedBroker, admin: AdminClient, topic_name: str, codec: str
) -> None:
    create(admin, topic_name, 3)
    records = sample_records(3)

    delivered = confluent_produce(broker.bootstrap_servers, topic_name, records, codec)
    consumed = confluent_consume(broker.bootstrap_servers, topic_name, range(3))

    assert_read_back(records, consumed, delivered)
    assert_stored_codec(broker.bootstrap_servers, topic_name, range(3), codec)


@pytest.mark.parametrize("codec", CODECS)
def test_one_megabyte_value(
    broker: EmbeddedBroker, admin: AdminClient, topic_name: str, codec: str
) -> None:
    create(admin, topic_name, 1)
    records = [
        Record(b"big", big_value(), (("size", b"1000000"),), 0, BASE_TIMESTAMP_MS),
        Record(b"after", body("after the big one"), (), 0),
    ]

    delivered = confluent_produce(broker.bootstrap_servers, topic_name, records, codec)
    consumed = confluent_consume(broker.bootstrap_servers, topic_name, [0])

    assert_read_back(records, consumed, delivered)
    first = stored_batches(broker.bootstrap_servers, topic_name, 0)[0]
    assert (first.base_offset, first.record_count) == (0, 1)
    assert_stored_codec(broker.bootstrap_servers, topic_name, [0], codec)


def test_lz4_batches_are_compressed(
    broker: EmbeddedBroker, admin: AdminClient, topic_name: str
) -> None:
    create(admin, topic_name, 1)
    records = [Record(None, body(str(i)) * 5, (), 0) for i in range(10)]
    confluent_produce(broker.bootstrap_servers, topic_name, records, "lz4")

    # however the client split them (a busy machine can end its linger early), every
    # stored batch is lz4 and together they hold the ten records
    batches = stored_batches(broker.bootstrap_servers, topic_name, 0)
    assert batches and {b.compression_type for b in batches} == {CODEC_IDS["lz4"]}
    assert sum(b.record_count for b in batches) == 10


def test_many_partitions_keep_per_partition_order(
    broker: EmbeddedBroker, admin: AdminClient, topic_name: str
) -> None:
    create(admin, topic_name, 32)
    records = keyed_records(320, keys=64)
    records += [Record(None, f"pinned-{p}".encode(), (), p) for p in range(32)]

    delivered = confluent_produce(broker.bootstrap_servers, topic_name, records, "lz4")
    consumed = confluent_consume(broker.bootstrap_servers, topic_name, range(32))

    assert_read_back(records, consumed, delivered)
    assert {c.partition for c in consumed} == set(range(32))
    assert len({c.partition for c in consumed if c.key is not None}) >= 16  # keys spread


def test_idempotent_producer(broker: EmbeddedBroker, admin: AdminClient, topic_name: str) -> None:
    create(admin, topic_name, 3)
    records = keyed_records(60, keys=10)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "enable.idempotence": True,
            "compression.type": "zstd",
        }
    )
    for r in records:
        producer.produce(topic_name, key=r.key, value=r.value, headers=list(r.headers))
    assert producer.flush(scaled(TIMEOUT)) == 0

    consumed = confluent_consume(broker.bootstrap_servers, topic_name, range(3))
    assert_read_back(records, consumed)
    assert_idempotent_batches(broker.bootstrap_servers, topic_name, range(3))


def test_admin_topic_lifecycle(broker: EmbeddedBroker, admin: AdminClient, topic_name: str) -> None:
    create(admin, topic_name, 2, **{"retention.ms": "123456"})
    assert (
        kafka_error(admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name]).code()
        == KafkaError.TOPIC_ALREADY_EXISTS
    )

    description = admin.describe_topics(TopicCollection([topic_name]))[topic_name].result()
    assert description.name == topic_name
    assert [p.id for p in description.partitions] == [0, 1]
    for p in description.partitions:
        assert p.leader.id == 0
        assert [n.id for n in p.replicas] == [n.id for n in p.isr] == [0]

    resource = ConfigResource(ResourceType.TOPIC, topic_name)
    configs = admin.describe_configs([resource])[resource].result()
    assert configs["retention.ms"].value == "123456"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].is_default

    admin.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(
        timeout=scaled(TIMEOUT))
    assert (
        kafka_error(admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name]).code()
        == KafkaError.INVALID_PARTITIONS
    )
    description = admin.describe_topics(TopicCollection([topic_name]))[topic_name].result()
    assert len(description.partitions) == 5
    records = [Record(b"k", body("in a new partition"), (), 4)]
    delivered = confluent_produce(broker.bootstrap_servers, topic_name, records)
    assert_read_back(
        records, confluent_consume(broker.bootstrap_servers, topic_name, [4]), delivered
    )

    admin.delete_topics([topic_name], operation_timeout=scaled(TIMEOUT))[topic_name].result()
    assert topic_name not in admin.list_topics(timeout=scaled(TIMEOUT)).topics
    assert (
        kafka_error(admin.delete_topics([topic_name])[topic_name]).code()
        == KafkaError.UNKNOWN_TOPIC_OR_PART
    )


def test_admin_rejects_replication_factor_above_one(admin: AdminClient, topic_name: str) -> None:
    future = admin.create_topics([NewTopic(topic_name, 1, 3)])[topic_name]
    assert kafka_error(future).code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_admin_describe_broker_configs_and_cluster(
    broker: EmbeddedBroker, admin: AdminClient
) -> None:
    resource = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result()
    assert int(configs["message.max.bytes"].value) >= 1_048_588
    # Dynamic (alterable) and unset, as Kafka 4.3 reports it; log.dirs is read-only.
    assert not configs["message.max.bytes"].is_read_only
    assert configs["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["log.dirs"].is_read_only
    assert configs["advertised.listeners"].value == f"PLAINTEXT://{broker.bootstrap_servers}"

    cluster = admin.describe_cluster().result(timeout=scaled(TIMEOUT))
    assert cluster.controller.id == 0
    assert [(n.id, f"{n.host}:{n.port}") for n in cluster.nodes] == [(0, broker.bootstrap_servers)]


def test_list_offsets_and_offsets_for_times(
    broker: EmbeddedBroker, admin: AdminClient, consumer: Consumer, topic_name: str
) -> None:
    create(admin, topic_name, 2)
    stamps = [BASE_TIMESTAMP_MS + 1000 * i for i in range(5)]
    produce_one_batch_each(broker.bootstrap_servers, topic_name, stamps)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)

    def offset(spec: OffsetSpec, tp: TopicPartition = tp0) -> tuple[int, int]:
        result = admin.list_offsets({tp: spec})[tp].result(timeout=scaled(TIMEOUT))
        return result.offset, result.timestamp

    assert offset(OffsetSpec.earliest())[0] == 0
    assert offset(OffsetSpec.latest())[0] == 5
    assert offset(OffsetSpec.latest(), tp1)[0] == 0
    assert offset(OffsetSpec.for_timestamp(stamps[2])) == (2, stamps[2])
    assert offset(OffsetSpec.for_timestamp(stamps[2] + 1)) == (3, stamps[3])
    assert offset(OffsetSpec.for_timestamp(0)) == (0, stamps[0])
    assert offset(OffsetSpec.for_timestamp(stamps[-1] + 1))[0] == -1
    assert offset(OffsetSpec.max_timestamp()) == (4, stamps[4])

    assert consumer.get_watermark_offsets(tp0, timeout=scaled(TIMEOUT)) == (0, 5)
    (found,) = consumer.offsets_for_times(
        [TopicPartition(topic_name, 0, stamps[3] - 500)], timeout=scaled(TIMEOUT)
    )
    assert found.offset == 3
    consumer.assign([found])  # seek by time, then read from there
    msg = consumer.poll(scaled(TIMEOUT))
    assert msg is not None and msg.error() is None
    assert (msg.offset(), msg.value(), msg.timestamp()[1]) == (3, b"v3", stamps[3])


def test_offsets_for_times_inside_one_batch(
    broker: EmbeddedBroker, admin: AdminClient, topic_name: str
) -> None:
    create(admin, topic_name, 1)
    stamps = [BASE_TIMESTAMP_MS + 1000 * i for i in range(5)]
    records = [Record(None, f"v{i}".encode(), (), 0, ts) for i, ts in enumerate(stamps)]
    confluent_produce(broker.bootstrap_servers, topic_name, records)  # one batch
    assert len(stored_batches(broker.bootstrap_servers, topic_name, 0)) == 1
    tp = TopicPartition(topic_name, 0)

    result = admin.list_offsets({tp: OffsetSpec.for_timestamp(stamps[2])})[tp].result()
    assert (result.offset, result.timestamp) == (2, stamps[2])


def test_max_timestamp_inside_one_batch(
    broker: EmbeddedBroker, admin: AdminClient, topic_name: str
) -> None:
    create(admin, topic_name, 1)
    stamps = [BASE_TIMESTAMP_MS + 1000 * i for i in range(5)]
    records = [Record(None, f"v{i}".encode(), (), 0, ts) for i, ts in enumerate(stamps)]
    confluent_produce(broker.bootstrap_servers, topic_name, records)  # one batch
    tp = TopicPartition(topic_name, 0)

    result = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result()
    assert (result.offset, result.timestamp) == (4, stamps[4])


def test_seek_to_an_offset(
    broker: EmbeddedBroker, admin: AdminClient, consumer: Consumer, topic_name: str
) -> None:
    create(admin, topic_name, 1)
    records = [Record(None, f"v{i}".encode(), (), 0) for i in range(10)]
    confluent_produce(broker.bootstrap_servers, topic_name, records)

    # Leaders known: no offset-query backoff.
    consumer.list_topics(topic_name, timeout=scaled(TIMEOUT))
    consumer.assign([TopicPartition(topic_name, 0, 7)])
    got = [consumer.poll(scaled(TIMEOUT)) for _ in range(3)]
    assert [(m.offset(), m.value()) for m in got if m is not None] == [
        (7, b"v7"),
        (8, b"v8"),
        (9, b"v9"),
    ]
    consumer.seek(TopicPartition(topic_name, 0, OFFSET_BEGINNING))
    first = consumer.poll(scaled(TIMEOUT))
    assert first is not None and (first.offset(), first.value()) == (0, b"v0")


def test_null_keys_fail_alone_in_a_compacted_batch(any_broker: AnyBroker, topic_name: str) -> None:
    """librdkafka's 0011_produce_batch: 100 records to a compacted topic, every tenth
    without a key, sent as one batch (linger 10 s, batch.num.messages 100). The broker
    names the keyless records (record_errors), so librdkafka fails them with INVALID_RECORD
    and the rest of their batch with _INVALID_DIFFERENT_RECORD; nothing of that batch is
    appended. On a loaded machine librdkafka may still split the records into several
    batches; then each batch holds a keyless record (they are 10 apart) unless it is
    shorter than 10, and such a short batch without one is appended whole: the assertions
    hold for any split."""
    bootstrap = any_broker.bootstrap_servers
    create(AdminClient({"bootstrap.servers": bootstrap}), topic_name, 1,
           **{"cleanup.policy": "compact"})
    null_keys = {i * 10 + 7 for i in range(10)}
    reports: dict[int, int] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10000,
                         "batch.num.messages": 100,
                         "message.timeout.ms": int(scaled(30000))})
    for i in range(100):
        producer.produce(topic_name, value=b"%d" % i, partition=0,
                         key=None if i in null_keys else b"k%d" % i,
                         on_delivery=lambda err, msg, i=i: reports.__setitem__(
                             i, err.code() if err is not None else 0))
    assert producer.flush(scaled(TIMEOUT)) == 0
    assert {i for i, code in reports.items() if code == KafkaError.INVALID_RECORD} == null_keys
    refused = {i for i, code in reports.items() if code == KafkaError._INVALID_DIFFERENT_RECORD}
    appended = sorted(i for i, code in reports.items() if code == 0)
    assert refused | set(appended) == set(range(100)) - null_keys, reports
    assert refused, f"no record refused for sharing a batch with a keyless one: {reports}"
    stored = confluent_consume(bootstrap, topic_name, [0])
    assert [int(m.value) for m in stored] == appended
