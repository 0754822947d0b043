"""Session expiry on both brokers: librdkafka's 0081 (DescribeConsumerGroups) replayed.
Static members (no LeaveGroup on close) consume, close, and DeleteGroups goes out exactly
``session.timeout.ms`` after the last close; Apache Kafka expires each member at its
deadline (the close's OffsetCommit restarted the session), so the delete succeeds, and it
must on headrace too."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from headrace.testing import ApacheKafka, EmbeddedBroker, scaled
from tests.compat.clients import confluent_produce
from tests.compat.records import Record
from tests.differential.support import create_topic, poll_until

GROUPS = 3
RECORDS = 100
# 0081's consumers get test_create_consumer's 6 s (Kafka's minimum session timeout).
SESSION_MS = 6000


@pytest.mark.parametrize("side", ["apache_kafka", "headrace_broker"])
def test_closed_static_members_are_gone_when_delete_groups_arrives_at_the_session_timeout(
        request: pytest.FixtureRequest, side: str) -> None:
    broker: ApacheKafka | EmbeddedBroker = request.getfixturevalue(side)
    bootstrap = broker.bootstrap_servers
    topic = f"sessions-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    confluent_produce(bootstrap, topic, [Record(None, f"v{i}".encode(), (), 0)
                                         for i in range(RECORDS)])
    groups = [f"{topic}-g{i}" for i in range(GROUPS)]
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": g,
                           "client.id": f"client_id_{i}",
                           "group.instance.id": f"group_instance_id_{i}",
                           "session.timeout.ms": SESSION_MS, "auto.offset.reset": "earliest",
                           "fetch.wait.max.ms": 50})
                 for i, g in enumerate(groups)]
    consumed = [0] * GROUPS
    for c in consumers:
        c.subscribe([topic])

    def all_consumed() -> bool:
        for i, c in enumerate(consumers):
            consumed[i] += sum(1 for m in c.consume(RECORDS, 0.05) if m.error() is None)
        return all(n >= RECORDS for n in consumed)

    poll_until("every static member to consume the topic", all_consumed)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for g, f in admin.describe_consumer_groups(groups).items():
        described = f.result(scaled(10))
        assert str(described.state) == "ConsumerGroupState.STABLE", (g, described)
        assert [m.group_instance_id for m in described.members] == [
            f"group_instance_id_{groups.index(g)}"]
    for c in consumers:
        c.close()  # commits the consumed offsets; static members send no LeaveGroup
    closed = time.monotonic()
    # Exactly the session timeout, as 0081 sleeps: the race under test, not a timeout.
    time.sleep(max(0.0, closed + SESSION_MS / 1000 - time.monotonic()))
    for f in admin.delete_consumer_groups(groups).values():
        f.result(scaled(10))  # raises on NON_EMPTY_GROUP
    listed = {g.group_id for g in admin.list_consumer_groups().result(scaled(10)).valid}
    assert not listed & set(groups)
