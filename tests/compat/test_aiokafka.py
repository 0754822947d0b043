"""aiokafka against the real broker: produce, consume, admin, offsets.

aiokafka stays on old, non-flexible protocol versions (measured with
scripts/client_api_versions.py: ApiVersions v0, Metadata v5, Produce v7, Fetch v11,
ListOffsets v3, CreateTopics v3, DescribeConfigs v2), so these tests cover the low end of
the advertised ranges. Header values may be None. Tests are plain functions that drive one
event loop each (``run``), bounded by ``TIMEOUT``; consumers use assign, no group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidPartitionsError

from headrace.testing import EmbeddedBroker, scaled
from tests.compat.clients import (
    TIMEOUT,
    aiokafka_consume_async,
    aiokafka_produce_async,
)
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
from tests.compat.wire import assert_stored_codec, stored_batches

T = TypeVar("T")

DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICATION_FACTOR = 36, 3, 38


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 2 * scaled(TIMEOUT)))


async def started_admin(bootstrap: str) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    return admin


async def create(bootstrap: str, topic: str, partitions: int, **config: str) -> None:
    admin = await started_admin(bootstrap)
    try:
        response = await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=config)])
        assert [e[1] for e in response.topic_errors] == [0]
    finally:
        await admin.close()


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(broker: EmbeddedBroker, topic_name: str, codec: str) -> None:
    bootstrap = broker.bootstrap_servers
    records = sample_records(3)

    async def scenario() -> None:
        await create(bootstrap, topic_name, 3)
        delivered = await aiokafka_produce_async(bootstrap, topic_name, records, codec)
        consumed = await aiokafka_consume_async(bootstrap, topic_name, range(3))
        assert_read_back(records, consumed, delivered)

    run(scenario())
    assert_stored_codec(bootstrap, topic_name, range(3), codec)


@pytest.mark.parametrize("codec", CODECS)
def test_one_megabyte_value(broker: EmbeddedBroker, topic_name: str, codec: str) -> None:
    bootstrap = broker.bootstrap_servers
    records = [
        Record(b"big", big_value(), (("size", b"1000000"),), 0, BASE_TIMESTAMP_MS),
        Record(b"after", body("after the big one"), (), 0),
    ]

    async def scenario() -> None:
        await create(bootstrap, topic_name, 1)
        delivered = await aiokafka_produce_async(bootstrap, topic_name, records, codec)
        consumed = await aiokafka_consume_async(bootstrap, topic_name, [0])
        assert_read_back(records, consumed, delivered)

    run(scenario())
    first = stored_batches(bootstrap, topic_name, 0)[0]
    assert (first.base_offset, first.record_count) == (0, 1)
    assert_stored_codec(bootstrap, topic_name, [0], codec)


def test_many_partitions_keep_per_partition_order(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers
    records = keyed_records(320, keys=64)
    records += [Record(None, f"pinned-{p}".encode(), (), p) for p in range(32)]

    async def scenario() -> None:
        await create(bootstrap, topic_name, 32)
        delivered = await aiokafka_produce_async(bootstrap, topic_name, records, "snappy")
        consumed = await aiokafka_consume_async(bootstrap, topic_name, range(32))
        assert_read_back(records, consumed, delivered)
        assert {c.partition for c in consumed} == set(range(32))
        assert len({c.partition for c in consumed if c.key is not None}) >= 16

    run(scenario())


def test_admin_topic_lifecycle(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers

    async def scenario() -> None:
        admin = await started_admin(bootstrap)
        try:
            await create(bootstrap, topic_name, 2, **{"retention.ms": "123456"})
            again = await admin.create_topics([NewTopic(topic_name, 2, 1)])
            assert [e[1] for e in again.topic_errors] == [TOPIC_ALREADY_EXISTS]

            (description,) = await admin.describe_topics([topic_name])
            assert (description["topic"], description["error_code"]) == (topic_name, 0)
            assert [
                (p["partition"], p["leader"], p["replicas"], p["isr"])
                for p in description["partitions"]
            ] == [(0, 0, [0], [0]), (1, 0, [0], [0])]

            (response,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic_name)]
            )
            (resource,) = response.resources
            assert resource[0] == 0  # error code
            configs = {e[0]: (e[1], e[3]) for e in resource[4]}  # name: (value, source)
            assert configs["retention.ms"] == ("123456", DYNAMIC_TOPIC_CONFIG)
            assert configs["cleanup.policy"] == ("delete", DEFAULT_CONFIG)

            await admin.create_partitions({topic_name: NewPartitions(5)})
            with pytest.raises(InvalidPartitionsError):
                await admin.create_partitions({topic_name: NewPartitions(3)})
            (description,) = await admin.describe_topics([topic_name])
            assert len(description["partitions"]) == 5
            records = [Record(b"k", body("in a new partition"), (), 4)]
            delivered = await aiokafka_produce_async(bootstrap, topic_name, records)
            consumed = await aiokafka_consume_async(bootstrap, topic_name, [4])
            assert_read_back(records, consumed, delivered)

            deleted = await admin.delete_topics([topic_name])
            assert [tuple(e) for e in deleted.topic_error_codes] == [(topic_name, 0)]
            assert topic_name not in await admin.list_topics()
            again_deleted = await admin.delete_topics([topic_name])
            assert [e[1] for e in again_deleted.topic_error_codes] == [UNKNOWN_TOPIC_OR_PARTITION]
            rf3 = await admin.create_topics([NewTopic(topic_name, 1, 3)])
            assert [e[1] for e in rf3.topic_errors] == [INVALID_REPLICATION_FACTOR]
        finally:
            await admin.close()

    run(scenario())


def test_admin_describe_broker_configs_and_cluster(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers

    async def scenario() -> None:
        admin = await started_admin(bootstrap)
        try:
            (response,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, "0")]
            )
            (resource,) = response.resources
            configs = {e[0]: (e[1], e[2], e[3]) for e in resource[4]}  # value, ro, source
            value, read_only, source = configs["message.max.bytes"]
            assert int(value) >= 1_048_588
            # Dynamic (alterable) and unset, as Kafka 4.3 reports it.
            assert (read_only, source) == (False, DEFAULT_CONFIG)

            cluster = await admin.describe_cluster()
            host, port = bootstrap.rsplit(":", 1)
            assert cluster["controller_id"] == 0
            assert [(b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
                (0, host, int(port))
            ]
        finally:
            await admin.close()

    run(scenario())


def test_list_offsets_and_offsets_for_times(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers
    stamps = [BASE_TIMESTAMP_MS + 1000 * i for i in range(5)]
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)

    async def scenario() -> None:
        await create(bootstrap, topic_name, 2)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i, ts in enumerate(stamps):  # one batch per record: awaited one by one
                await producer.send_and_wait(
                    topic_name, value=f"v{i}".encode(), partition=0, timestamp_ms=ts
                )
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            assert await consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
            assert await consumer.end_offsets([tp0, tp1]) == {tp0: 5, tp1: 0}
            found = await consumer.offsets_for_times({tp0: stamps[3] - 500, tp1: stamps[0]})
            assert found[tp1] is None
            assert (found[tp0].offset, found[tp0].timestamp) == (3, stamps[3])
            exact = await consumer.offsets_for_times({tp0: stamps[2]})
            assert (exact[tp0].offset, exact[tp0].timestamp) == (2, stamps[2])
            assert (await consumer.offsets_for_times({tp0: stamps[-1] + 1}))[tp0] is None

            consumer.assign([tp0])
            consumer.seek(tp0, found[tp0].offset)  # seek by time, then read from there
            message = await consumer.getone()
            assert (message.offset, message.value, message.timestamp) == (3, b"v3", stamps[3])
        finally:
            await consumer.stop()

    run(scenario())
