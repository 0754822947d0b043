"""Transactions on both brokers: a committed, an aborted and an open transaction, then
what read_uncommitted and read_committed consumers see, the last stable offset while a
transaction is open, and offsets committed inside a transaction."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from kafka.protocol.consumer import OffsetFetchRequest

from tests.differential.conftest import Brokers
from tests.differential.support import create_topic, read_partition, watermarks
from tests.integration.rawclient import RawClient
from tests.integration.txn_support import transactional_producer


def send(producer: object, topic: str, values: list[bytes]) -> None:
    for v in values:
        producer.produce(topic, value=v, key=b"k", partition=0)  # type: ignore[attr-defined]


def views(bootstrap: str, topic: str) -> dict[str, object]:
    return {
        "uncommitted": [(o, v) for o, _, v, _, _ in read_partition(bootstrap, topic)],
        "committed": [(o, v) for o, _, v, _, _ in read_partition(
            bootstrap, topic, isolation="read_committed")],
        "high_watermark": watermarks(bootstrap, topic),
        "last_stable": watermarks(bootstrap, topic, isolation="read_committed"),
    }


def committed(bootstrap: str, group: str, topic: str) -> list[tuple[int, str]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [(tp.offset, tp.metadata or "")
                for tp in c.committed([TopicPartition(topic, 0)], timeout=10)]
    finally:
        c.close()


def raw_offset_fetch(bootstrap: str, group: str, topic: str,
                     require_stable: bool) -> tuple[int, int, int, str | None]:
    """OffsetFetch v7: (error, partition error, offset, metadata) for partition 0."""
    with RawClient(bootstrap) as c:
        r = c.request(OffsetFetchRequest(
            group_id=group, require_stable=require_stable,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
                name=topic, partition_indexes=[0])]), 7)
    part = r.topics[0].partitions[0]
    return (r.error_code, part.error_code, part.committed_offset, part.metadata)


def observe(bootstrap: str, topic: str) -> dict[str, object]:
    create_topic(bootstrap, topic)
    seen: dict[str, object] = {}
    p = transactional_producer(bootstrap, f"{topic}-txn")
    p.begin_transaction()
    send(p, topic, [b"c1", b"c2"])
    p.commit_transaction(20)
    p.begin_transaction()
    send(p, topic, [b"a1", b"a2", b"a3"])
    assert p.flush(20) == 0  # else librdkafka purges them unsent on abort
    p.abort_transaction(20)
    p.begin_transaction()
    send(p, topic, [b"o1"])
    assert p.flush(20) == 0
    seen["open"] = views(bootstrap, topic)
    group = f"{topic}-group"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        metadata = consumer.consumer_group_metadata()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 2, "in-txn")], metadata, 20)
        seen["pending_offsets"] = [raw_offset_fetch(bootstrap, group, topic, stable)
                                   for stable in (False, True)]
        p.commit_transaction(20)
    finally:
        consumer.close()
    seen["closed"] = views(bootstrap, topic)
    seen["offsets_after_commit"] = committed(bootstrap, group, topic)
    seen["raw_after_commit"] = raw_offset_fetch(bootstrap, group, topic, True)
    return seen


def test_transactions_match(brokers: Brokers, topic_name: str) -> None:
    reference = observe(brokers.kafka, topic_name)
    ours = observe(brokers.headrace, topic_name)
    assert ours == reference
    assert reference["open"] == {  # type: ignore[comparison-overlap]
        "uncommitted": [(0, b"c1"), (1, b"c2"), (3, b"a1"), (4, b"a2"), (5, b"a3"), (7, b"o1")],
        "committed": [(0, b"c1"), (1, b"c2")],
        "high_watermark": (0, 8), "last_stable": (0, 7)}
    assert reference["pending_offsets"] == [(0, 0, -1, ""), (0, 88, -1, "")]
