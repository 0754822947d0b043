"""Metadata v10+ lookups by topic id, as the Java Admin's ``describeTopics(TopicCollection.
ofTopicIds(...))`` sends them: a non-zero id with an empty (or null) name."""

from __future__ import annotations

import uuid

from kafka.protocol.metadata import MetadataRequest

from headrace.protocol.errors import ErrorCode
from headrace.testing import EmbeddedBroker
from tests.integration.rawclient import RawClient

Topic = MetadataRequest.MetadataRequestTopic


def metadata(c: RawClient, topics: list[Topic], version: int = 12) -> list[tuple[object, ...]]:
    request = MetadataRequest(
        topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    response = c.request(request, version)
    return [(t.error_code, t.name, t.topic_id, len(t.partitions)) for t in response.topics]


def test_lookup_by_topic_id(broker: EmbeddedBroker, topic_name: str) -> None:
    with RawClient(broker.bootstrap_servers) as c:
        created = c.request(
            MetadataRequest(
                topics=[Topic(topic_id=None, name=topic_name)],
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            ),
            12,
        )
        topic_id = created.topics[0].topic_id
        assert isinstance(topic_id, uuid.UUID) and topic_id.int != 0
        unknown = uuid.uuid4()

        # the Java client's form: id and an empty name; kafka-python's: a null name
        assert metadata(
            c,
            [
                Topic(topic_id=topic_id, name=""),
                Topic(topic_id=topic_id, name=None),
                Topic(topic_id=unknown, name=""),
            ],
        ) == [
            (0, topic_name, topic_id, 1),
            (0, topic_name, topic_id, 1),
            (ErrorCode.UNKNOWN_TOPIC_ID, None, unknown, 0),
        ]
        # by name still works, and v10 (the first version with ids) behaves the same
        assert metadata(c, [Topic(topic_id=None, name=topic_name)]) == [
            (0, topic_name, topic_id, 1)
        ]
        assert metadata(c, [Topic(topic_id=topic_id, name="")], version=10) == [
            (0, topic_name, topic_id, 1)
        ]
        # an unknown id is never auto-created
        assert metadata(c, [Topic(topic_id=unknown, name="")]) == [
            (ErrorCode.UNKNOWN_TOPIC_ID, None, unknown, 0)
        ]
