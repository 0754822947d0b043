"""KIP-848 consumer groups (``group.protocol=consumer``) with librdkafka, against the real
broker process.

Each member polls in its own thread and journals its assignment callbacks with one
monotonic clock; the checks read the journals. The broker tells members to heartbeat every
200 ms so reconciliation takes a few heartbeats, and expires sessions after 4 s. Waits poll
a condition against a deadline; nothing sleeps for correctness.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.kip848_members import Member, check_never_owned_twice, produce
from tests.integration.test_groups import create_topic, wait_until

SESSION_MS = 4000
HEARTBEAT_MS = 200


@pytest.fixture(scope="module")
def kbroker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=[
            "--group-consumer-session-timeout-ms", str(SESSION_MS),
            "--group-consumer-heartbeat-interval-ms", str(HEARTBEAT_MS)]) as b:
        yield b


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for m in started:
        if m.thread.is_alive():
            m.stop()


def test_join_consume_commit(kbroker: EmbeddedBroker, topic_name: str,
                             members: list[Member]) -> None:
    bs = kbroker.bootstrap_servers
    create_topic(bs, topic_name, 4)
    produce(bs, topic_name, 4, 5)
    journal: list[Any] = []
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(bs, group, [topic_name], journal, "a")
    members.append(a)
    wait_until(lambda: len(a.records) == 20, 30, "20 records")
    assert a.owned == {(topic_name, p) for p in range(4)}
    assert sorted(a.records) == [(topic_name, p, o) for p in range(4) for o in range(5)]
    a.stop(close=False)
    a.consumer.commit(asynchronous=False)
    committed = a.consumer.committed([TopicPartition(topic_name, p) for p in range(4)],
                                     timeout=scaled(10))
    assert [tp.offset for tp in committed] == [5, 5, 5, 5]
    a.consumer.close()


def test_second_member_takes_half_never_owned_twice(kbroker: EmbeddedBroker, topic_name: str,
                                                    members: list[Member]) -> None:
    bs = kbroker.bootstrap_servers
    create_topic(bs, topic_name, 4)
    journal: list[Any] = []
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(bs, group, [topic_name], journal, "a")
    members.append(a)
    wait_until(lambda: len(a.owned) == 4, 30, "a owns all four partitions")
    b = Member(bs, group, [topic_name], journal, "b")
    members.append(b)
    wait_until(lambda: len(a.owned) == 2 and len(b.owned) == 2, 30, "two partitions each")
    assert a.owned | b.owned == {(topic_name, p) for p in range(4)}
    check_never_owned_twice(journal)
    # b leaves cleanly: a gets everything back.
    b.stop()
    wait_until(lambda: len(a.owned) == 4, 30, "a owns all four again")
    check_never_owned_twice(journal)


_CRASHER = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.protocol": "consumer"})
c.subscribe([sys.argv[3]], on_assign=lambda c, ps: print("assigned", len(ps), flush=True))
while True:
    c.poll(0.1)
"""


def test_crashed_member_is_fenced_and_its_partitions_move(
        kbroker: EmbeddedBroker, topic_name: str, members: list[Member]) -> None:
    bs = kbroker.bootstrap_servers
    create_topic(bs, topic_name, 4)
    journal: list[Any] = []
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(bs, group, [topic_name], journal, "a")
    members.append(a)
    wait_until(lambda: len(a.owned) == 4, 30, "a owns all four partitions")
    crasher = subprocess.Popen([sys.executable, "-c", _CRASHER, bs, group, topic_name],
                               stdout=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(a.owned) == 2, 30, "a gives two partitions to the newcomer")
        admin = AdminClient({"bootstrap.servers": bs})
        desc = admin.describe_consumer_groups([group])[group].result(timeout=scaled(10))
        assert len(desc.members) == 2
    finally:
        crasher.kill()
        crasher.wait(scaled(10))
    killed_at = time.monotonic()
    wait_until(lambda: len(a.owned) == 4, SESSION_MS / 1000 + 20, "a owns all four again")
    # Not before the session timeout: the broker only fences on expiry.
    assert time.monotonic() - killed_at >= SESSION_MS / 1000 - 1.0
    check_never_owned_twice(journal)


def test_static_member_gets_its_partitions_back(kbroker: EmbeddedBroker, topic_name: str,
                                                members: list[Member]) -> None:
    bs = kbroker.bootstrap_servers
    create_topic(bs, topic_name, 4)
    journal: list[Any] = []
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(bs, group, [topic_name], journal, "a", **{"group.instance.id": "static-a"})
    members.append(a)
    wait_until(lambda: len(a.owned) == 4, 30, "a owns all four partitions")
    b = Member(bs, group, [topic_name], journal, "b")
    members.append(b)
    wait_until(lambda: len(a.owned) == 2 and len(b.owned) == 2, 30, "two partitions each")
    a_had = set(a.owned)
    b_events = sum(1 for e in journal if e[1] == "b")
    a.stop()  # a static member's close leaves with epoch -2: its partitions wait for it
    a2 = Member(bs, group, [topic_name], journal, "a2", **{"group.instance.id": "static-a"})
    members.append(a2)
    wait_until(lambda: a2.owned == a_had, 30, "the static member's partitions come back")
    assert sum(1 for e in journal if e[1] == "b") == b_events  # b never rebalanced
    check_never_owned_twice(journal)


def test_regex_subscription_and_new_partitions(kbroker: EmbeddedBroker, topic_name: str,
                                               members: list[Member]) -> None:
    bs = kbroker.bootstrap_servers
    prefix = topic_name[:40]
    create_topic(bs, f"{prefix}-x", 1)
    create_topic(bs, f"{prefix}-y", 2)
    journal: list[Any] = []
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(bs, group, [f"^{prefix}-.*"], journal, "a")
    members.append(a)
    wait_until(lambda: len(a.owned) == 3, 30, "both matching topics")
    create_topic(bs, f"{prefix}-z", 1)
    wait_until(lambda: (f"{prefix}-z", 0) in a.owned, 30, "a topic created later")
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_partitions([NewPartitions(f"{prefix}-x", 3)])[f"{prefix}-x"].result(
        timeout=scaled(10))
    wait_until(lambda: {(f"{prefix}-x", p) for p in range(3)} <= a.owned, 30,
               "the added partitions")


def test_range_assignor_chosen_by_the_client(kbroker: EmbeddedBroker, topic_name: str,
                                             members: list[Member]) -> None:
    bs = kbroker.bootstrap_servers
    create_topic(bs, topic_name, 4)
    journal: list[Any] = []
    group = f"g-{uuid.uuid4().hex[:8]}"
    conf = {"group.remote.assignor": "range"}
    a = Member(bs, group, [topic_name], journal, "a", **conf)
    members.append(a)
    wait_until(lambda: len(a.owned) == 4, 30, "a owns all four partitions")
    b = Member(bs, group, [topic_name], journal, "b", **conf)
    members.append(b)
    wait_until(lambda: len(a.owned) == 2 and len(b.owned) == 2, 30, "two partitions each")
    admin = AdminClient({"bootstrap.servers": bs})
    desc = admin.describe_consumer_groups([group])[group].result(timeout=scaled(10))
    ranges = sorted(sorted(tp.partition for tp in m.assignment.topic_partitions)
                    for m in desc.members)
    assert ranges == [[0, 1], [2, 3]]
    check_never_owned_twice(journal)


def test_admin_describe_list_delete(kbroker: EmbeddedBroker, topic_name: str,
                                    members: list[Member]) -> None:
    bs = kbroker.bootstrap_servers
    create_topic(bs, topic_name, 2)
    journal: list[Any] = []
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(bs, group, [topic_name], journal, "a", **{"client.id": "describe-me"})
    members.append(a)
    wait_until(lambda: len(a.owned) == 2, 30, "a owns both partitions")
    admin = AdminClient({"bootstrap.servers": bs})
    desc = admin.describe_consumer_groups([group])[group].result(timeout=scaled(10))
    assert desc.type == ConsumerGroupType.CONSUMER
    assert desc.state == ConsumerGroupState.STABLE
    assert desc.partition_assignor == "uniform"
    (member,) = desc.members
    assert member.client_id == "describe-me"
    assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]

    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(
        timeout=scaled(10))
    assert group in {g.group_id for g in listed.valid}
    classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(
        timeout=scaled(10))
    assert group not in {g.group_id for g in classic.valid}

    with pytest.raises(KafkaException) as e:
        admin.delete_consumer_groups([group])[group].result(timeout=scaled(10))
    assert "NON_EMPTY_GROUP" in str(e.value)
    a.stop()
    wait_until(lambda: admin.describe_consumer_groups([group])[group].result(
        timeout=scaled(10)).state == ConsumerGroupState.EMPTY, 10, "the group to be empty")
    admin.delete_consumer_groups([group])[group].result(timeout=scaled(10))
    listed = admin.list_consumer_groups().result(timeout=scaled(10))
    assert group not in {g.group_id for g in listed.valid}


def test_classic_and_consumer_groups_conflict(kbroker: EmbeddedBroker, topic_name: str,
                                              members: list[Member]) -> None:
    bs = kbroker.bootstrap_servers
    create_topic(bs, topic_name, 1)
    journal: list[Any] = []
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(bs, group, [topic_name], journal, "a")
    members.append(a)
    wait_until(lambda: len(a.owned) == 1, 30, "a owns the partition")
    classic = Consumer({"bootstrap.servers": bs, "group.id": group,
                        "group.protocol": "classic"})
    try:
        classic.subscribe([topic_name])
        msg = wait_until(lambda: classic.poll(0.2), 30, "an error for the classic member")
        assert msg.error() is not None
        assert "INCONSISTENT_GROUP_PROTOCOL" in msg.error().name() or \
            "Inconsistent" in str(msg.error())
    finally:
        classic.close()


def test_members_rejoin_after_a_broker_restart(tmp_path: Any, topic_name: str,
                                               members: list[Member]) -> None:
    """After a restart the member carries on (its group state is persisted, see
    ``test_consumer_group_persistence``) and consumes what was produced meanwhile, from
    its committed offsets."""
    with EmbeddedBroker(data_dir=tmp_path / "data", extra_args=[
            "--group-consumer-session-timeout-ms", str(SESSION_MS),
            "--group-consumer-heartbeat-interval-ms", str(HEARTBEAT_MS)]) as b:
        bs = b.bootstrap_servers
        create_topic(bs, topic_name, 2)
        produce(bs, topic_name, 2, 3)
        journal: list[Any] = []
        group = f"g-{uuid.uuid4().hex[:8]}"
        a = Member(bs, group, [topic_name], journal, "a",
                   **{"enable.auto.commit": True, "auto.commit.interval.ms": 100})
        members.append(a)
        wait_until(lambda: len(a.records) == 6, 30, "six records")
        checker = Consumer({"bootstrap.servers": bs, "group.id": group})
        try:
            wait_until(lambda: all(tp.offset == 3 for tp in checker.committed(
                [TopicPartition(topic_name, p) for p in range(2)], timeout=scaled(10))), 10,
                "the auto-commit of both partitions")
        finally:
            checker.close()
        b.restart()
        produce(bs, topic_name, 2, 2)
        wait_until(lambda: len(a.records) == 10, 60, "the records produced after the restart")
        assert sorted(a.records) == sorted(
            [(topic_name, p, o) for p in range(2) for o in range(5)])
        a.stop()
