"""Topic ids on the wire: Fetch v13+ and Metadata v10+ name topics by their UUID."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest

from headrace.protocol.errors import ErrorCode
from headrace.testing import EmbeddedBroker, scaled
from tests.integration.rawclient import RawClient

_FT = FetchRequest.FetchTopic
_FP = _FT.FetchPartition


def _setup(broker: EmbeddedBroker, topic: str) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=scaled(10))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(3):
        producer.produce(topic, value=f"v{i}".encode(), partition=1)
    assert producer.flush(scaled(10)) == 0
    client = RawClient(broker.bootstrap_servers)
    try:
        meta = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=topic, topic_id=uuid.UUID(int=0))], allow_auto_topic_creation=False), 12)
    finally:
        client.close()
    topic_id = meta.topics[0].topic_id
    assert topic_id != uuid.UUID(int=0)
    return topic_id


def _fetch(topic_id: uuid.UUID, version: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[_FT(topic_id=topic_id, partitions=[
            _FP(partition=1, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20)])])


def test_fetch_by_topic_id_every_version(broker: EmbeddedBroker, topic_name: str) -> None:
    topic_id = _setup(broker, topic_name)
    client = RawClient(broker.bootstrap_servers)
    try:
        for version in range(13, 19):
            resp = client.request(_fetch(topic_id, version), version)
            assert resp.error_code == 0
            (topic,) = resp.responses
            assert topic.topic_id == topic_id
            (part,) = topic.partitions
            assert (part.partition_index, part.error_code, part.high_watermark) == (1, 0, 3)
            assert part.records  # three records, verbatim
    finally:
        client.close()


def test_fetch_unknown_topic_id(broker: EmbeddedBroker) -> None:
    unknown = uuid.uuid4()
    client = RawClient(broker.bootstrap_servers)
    try:
        resp = client.request(_fetch(unknown, 13), 13)
        (topic,) = resp.responses
        assert topic.topic_id == unknown
        assert [p.error_code for p in topic.partitions] == [ErrorCode.UNKNOWN_TOPIC_ID]
    finally:
        client.close()


def test_metadata_by_topic_id(broker: EmbeddedBroker, topic_name: str) -> None:
    topic_id = _setup(broker, topic_name)
    unknown = uuid.uuid4()
    client = RawClient(broker.bootstrap_servers)
    try:
        resp = client.request(MetadataRequest(topics=[
            MetadataRequest.MetadataRequestTopic(name=None, topic_id=topic_id),
            MetadataRequest.MetadataRequestTopic(name=None, topic_id=unknown)],
            allow_auto_topic_creation=True), 12)
        found, missing = resp.topics
        assert (found.error_code, found.name, found.topic_id) == (0, topic_name, topic_id)
        assert len(found.partitions) == 2
        assert (missing.error_code, missing.name) == (ErrorCode.UNKNOWN_TOPIC_ID, None)
    finally:
        client.close()
