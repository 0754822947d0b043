"""Classic-protocol consumer groups on both brokers: two confluent-kafka consumers join
(range and cooperative-sticky), one leaves, offsets are committed; what DescribeGroups,
ListGroups and OffsetFetch report is compared. Member ids and hosts are generated, so
members are compared by client id and assignments as a sorted list."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from headrace.testing import scaled
from tests.compat.clients import confluent_produce
from tests.compat.records import Record
from tests.differential.conftest import Brokers
from tests.differential.support import create_topic, poll_until

PARTITIONS = 4


def consumer(bootstrap: str, group: str, name: str, strategy: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                  "partition.assignment.strategy": strategy, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "heartbeat.interval.ms": 100,
                  "session.timeout.ms": 6000, "fetch.wait.max.ms": 50})
    return c


def assigned(consumers: list[Consumer]) -> list[list[int]]:
    for c in consumers:
        c.poll(0.05)
    return sorted(sorted(tp.partition for tp in c.assignment()) for c in consumers)


def describe(bootstrap: str, group: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    d = admin.describe_consumer_groups([group])[group].result(scaled(10))
    return {
        "state": str(d.state), "simple": d.is_simple_consumer_group,
        "assignor": d.partition_assignor,
        "members": sorted((m.client_id, sorted(tp.partition for tp in m.assignment.topic_partitions))
                          for m in d.members),
    }


def listed(bootstrap: str, group: str) -> list[tuple[str, str]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_groups().result(scaled(10))
    return [(g.group_id, str(g.state)) for g in result.valid if g.group_id == group]


def observe(bootstrap: str, topic: str, strategy: str) -> dict[str, Any]:
    create_topic(bootstrap, topic, PARTITIONS)
    confluent_produce(bootstrap, topic, [Record(b"k", f"v{i}".encode(), (), i % PARTITIONS)
                                         for i in range(20)])
    group = f"{topic}-g"
    seen: dict[str, Any] = {}
    a = consumer(bootstrap, group, "member-a", strategy)
    b = consumer(bootstrap, group, "member-b", strategy)
    try:
        a.subscribe([topic])
        seen["alone"] = poll_until("a assigned", lambda: (
            x := assigned([a])) == [list(range(PARTITIONS))] and x)
        b.subscribe([topic])
        seen["pair"] = poll_until("both assigned", lambda: (
            x := assigned([a, b])) == [[0, 1], [2, 3]] and x)
        seen["describe_pair"] = poll_until("stable pair", lambda: (
            d := describe(bootstrap, group))["state"] == "ConsumerGroupState.STABLE"
            and len(d["members"]) == 2 and d)
        seen["listed"] = listed(bootstrap, group)
        a.commit(offsets=[TopicPartition(topic, p, 3 + p, f"m{p}") for p in range(PARTITIONS)],
                 asynchronous=False)
        b.close()
        seen["after_leave"] = poll_until("a has all again", lambda: (
            x := assigned([a])) == [list(range(PARTITIONS))] and x)
        seen["describe_after_leave"] = poll_until("stable single", lambda: (
            d := describe(bootstrap, group))["state"] == "ConsumerGroupState.STABLE"
            and len(d["members"]) == 1 and d)
        seen["committed"] = [(tp.partition, tp.offset, tp.metadata) for tp in a.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=scaled(10))]
    finally:
        a.close()
    seen["describe_empty"] = describe(bootstrap, group)
    seen["listed_empty"] = listed(bootstrap, group)
    return seen


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_group_rebalances_match(brokers: Brokers, topic_name: str, strategy: str) -> None:
    reference = observe(brokers.kafka, topic_name, strategy)
    ours = observe(brokers.headrace, topic_name, strategy)
    assert ours == reference
    assert reference["describe_pair"]["assignor"] == strategy


def kafka_python_observe(bootstrap: str, topic: str) -> dict[str, Any]:
    create_topic(bootstrap, topic, 2)
    group = f"{topic}-g"
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="kp",
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      heartbeat_interval_ms=100)
    try:
        # Metadata first: kafka-python's range assignor skips topics it has no metadata for.
        poll_until("kafka-python metadata", lambda: c.partitions_for_topic(topic))
        c.subscribe([topic])
        poll_until("kafka-python assigned", lambda: c.poll(50) is not None and c.assignment())
        c.commit({KpTopicPartition(topic, 0): _offset_meta(5, "five"),
                  KpTopicPartition(topic, 1): _offset_meta(7, "")})
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            described = scrub(admin.describe_groups([group]))
            offsets = sorted((tp.partition, om.offset, om.metadata) for tp, om in
                             admin.list_group_offsets({group: None})[group].items())
            groups = [scrub(g) for g in admin.list_groups() if group in str(g)]
        finally:
            admin.close()
    finally:
        c.close()
    return {"described": described, "offsets": offsets, "listed": groups}


GENERATED = {"member_id", "client_host"}


def scrub(value: Any) -> Any:
    """``value`` without the generated member ids and client hosts."""
    if isinstance(value, dict):
        return {k: "*" if k in GENERATED else scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(scrub(v) for v in value)
    return value


def _offset_meta(offset: int, metadata: str) -> Any:
    from kafka.structs import OffsetAndMetadata
    return OffsetAndMetadata(offset, metadata, -1)


def test_kafka_python_group_matches(brokers: Brokers, topic_name: str) -> None:
    reference = kafka_python_observe(brokers.kafka, topic_name)
    ours = kafka_python_observe(brokers.headrace, topic_name)
    assert ours == reference
    assert reference["offsets"] == [(0, 5, "five"), (1, 7, "")]
