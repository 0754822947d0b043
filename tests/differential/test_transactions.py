"""Transactions on both brokers: a committed, an aborted and an open transaction, then
what read_uncommitted and read_committed consumers see, the last stable offset while a
transaction is open, and offsets committed inside a transaction."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.protocol.consumer import OffsetFetchRequest

from headrace.testing import scaled
from tests.differential.conftest import Brokers
from tests.differential.support import create_topic, poll_until, read_partition, watermarks
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
                for tp in c.committed([TopicPartition(topic, 0)], timeout=scaled(10))]
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
    p.commit_transaction(scaled(20))
    p.begin_transaction()
    send(p, topic, [b"a1", b"a2", b"a3"])
    assert p.flush(scaled(20)) == 0  # else librdkafka purges them unsent on abort
    p.abort_transaction(scaled(20))
    p.begin_transaction()
    send(p, topic, [b"o1"])
    assert p.flush(scaled(20)) == 0
    seen["open"] = views(bootstrap, topic)
    group = f"{topic}-group"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        metadata = consumer.consumer_group_metadata()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 2, "in-txn")], metadata, 20)
        seen["pending_offsets"] = [raw_offset_fetch(bootstrap, group, topic, stable)
                                   for stable in (False, True)]
        p.commit_transaction(scaled(20))
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


def kafka_python_observe(bootstrap: str, topic: str) -> dict[str, object]:
    """The same shape of transactions through kafka-python's transactional producer, read
    back with kafka-python at both isolation levels."""
    create_topic(bootstrap, topic)
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-kp-txn")
    offsets: list[int] = []
    try:
        p.init_transactions()
        for values, commit in (([b"c1", b"c2"], True), ([b"a1"], False), ([b"c3"], True)):
            p.begin_transaction()
            futures = [p.send(topic, value=v, key=b"k", partition=0) for v in values]
            p.flush()
            offsets += [f.get(scaled(10)).offset for f in futures]
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close()
    views = {}
    for isolation in ("read_uncommitted", "read_committed"):
        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                          isolation_level=isolation, fetch_max_wait_ms=50)
        try:
            tp = KpTopicPartition(topic, 0)
            c.assign([tp])
            c.seek_to_beginning(tp)
            end = c.end_offsets([tp])[tp]
            got: list[tuple[int, bytes]] = []
            poll_until(f"{isolation} read to {end}", lambda c=c, got=got, tp=tp, end=end: (
                got.extend((r.offset, r.value) for r in c.poll(100).get(tp, []))
                or c.position(tp) >= end))
            views[isolation] = (end, got)
        finally:
            c.close()
    return {"offsets": offsets, "views": views}


def test_kafka_python_transactions_match(brokers: Brokers, topic_name: str) -> None:
    reference = kafka_python_observe(brokers.kafka, topic_name)
    ours = kafka_python_observe(brokers.headrace, topic_name)
    assert ours == reference
    assert reference == {"offsets": [0, 1, 3, 5], "views": {
        "read_uncommitted": (7, [(0, b"c1"), (1, b"c2"), (3, b"a1"), (5, b"c3")]),
        "read_committed": (7, [(0, b"c1"), (1, b"c2"), (5, b"c3")])}}
