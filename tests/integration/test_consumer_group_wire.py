"""KIP-848 answers on the wire, request by request, with the outcomes Apache Kafka 4.3
gives (recorded against ``headrace.testing.ApacheKafka``; deliberate differences are
named where they are asserted)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)

from headrace.protocol.errors import ErrorCode
from headrace.protocol.messages import ConsumerGroupDescribeRequest as Describe
from headrace.protocol.messages import ConsumerGroupHeartbeatRequest as HB
from headrace.testing import EmbeddedBroker, scaled
from tests.integration.rawclient import RawClient

_CT = OffsetCommitRequest.OffsetCommitRequestTopic
_CP = _CT.OffsetCommitRequestPartition
_FG = OffsetFetchRequest.OffsetFetchRequestGroup


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[RawClient]:
    c = RawClient(broker.bootstrap_servers)
    yield c
    c.close()


@pytest.fixture
def topic(broker: EmbeddedBroker, topic_name: str) -> str:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic_name, 4, 1)])[topic_name].result(timeout=scaled(10))
    return topic_name


def join(c: RawClient, group: str, topic: str, member: str | None = None,
         instance: str | None = None, version: int = 1, **kw: Any) -> Any:
    return c.request(HB(group_id=group,
                        member_id=str(uuid.uuid4()) if member is None else member,
                        instance_id=instance, member_epoch=0, rebalance_timeout_ms=30000,
                        subscribed_topic_names=[topic], topic_partitions=[], **kw), version)


def beat(c: RawClient, group: str, member: str, epoch: int, instance: str | None = None) -> Any:
    return c.request(HB(group_id=group, member_id=member, member_epoch=epoch,
                        instance_id=instance, topic_partitions=None), 1)


def test_join_and_epoch_errors(client: RawClient, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    j = join(client, group, topic)
    assert j.error_code == 0 and j.heartbeat_interval_ms == 5000
    (tps,) = j.assignment.topic_partitions
    assert sorted(tps.partitions) == [0, 1, 2, 3]
    ahead = beat(client, group, j.member_id, j.member_epoch + 1)
    assert (ahead.error_code, ahead.member_epoch, ahead.assignment) == (
        ErrorCode.FENCED_MEMBER_EPOCH, 0, None)
    assert beat(client, group, "zzz", j.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    ok = beat(client, group, j.member_id, j.member_epoch)
    assert (ok.error_code, ok.member_epoch, ok.assignment) == (0, j.member_epoch, None)
    left = beat(client, group, j.member_id, -1)
    assert (left.error_code, left.member_epoch, left.heartbeat_interval_ms) == (0, -1, 0)


def test_request_validation(client: RawClient, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    assert join(client, group, topic, member="").error_code == ErrorCode.INVALID_REQUEST
    v0 = join(client, group, topic, member="", version=0)
    assert v0.error_code == 0 and v0.member_id  # v0: the coordinator names the member
    bad = join(client, group, topic, server_assignor="sticky")
    assert bad.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    regex = client.request(HB(group_id=group, member_id="x", member_epoch=0,
                              rebalance_timeout_ms=30000, subscribed_topic_regex="(",
                              topic_partitions=[]), 1)
    assert regex.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    # Kafka: GROUP_ID_NOT_FOUND; here UNKNOWN_MEMBER_ID so members rejoin after a restart.
    unknown = beat(client, f"g-{uuid.uuid4().hex[:8]}", "m", 5)
    assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    missing = f"g-{uuid.uuid4().hex[:8]}"
    leave = beat(client, missing, "m", -1)
    assert (leave.error_code, leave.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND, f"Group {missing} not found.")


def test_static_membership(client: RawClient, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = join(client, group, topic, instance="i1")
    assert first.error_code == 0
    second = str(uuid.uuid4())
    assert join(client, group, topic, member=second, instance="i1").error_code == \
        ErrorCode.UNRELEASED_INSTANCE_ID
    left = beat(client, group, first.member_id, -2, instance="i1")
    assert (left.error_code, left.member_epoch) == (0, -2)
    back = join(client, group, topic, member=second, instance="i1")
    assert (back.error_code, back.member_epoch) == (0, first.member_epoch)
    assert sorted(back.assignment.topic_partitions[0].partitions) == [0, 1, 2, 3]
    old = beat(client, group, first.member_id, first.member_epoch, instance="i1")
    assert old.error_code == ErrorCode.FENCED_INSTANCE_ID


def test_offset_commit_and_fetch_check_the_member_epoch(client: RawClient, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    j = join(client, group, topic)
    m, e = j.member_id, j.member_epoch

    def commit(epoch: int, member: str, version: int = 9) -> int:
        r = client.request(OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=epoch, member_id=member,
            group_instance_id=None, retention_time_ms=-1, topics=[_CT(name=topic, partitions=[
                _CP(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                    committed_metadata="")])]), version)
        return int(r.topics[0].partitions[0].error_code)

    assert commit(e, m) == 0
    assert commit(e - 1, m) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit(e + 1, m) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit(e, "zzz") == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(-1, "") == ErrorCode.UNKNOWN_MEMBER_ID  # the group has members
    assert commit(e, m, version=8) == ErrorCode.UNSUPPORTED_VERSION

    def fetch(epoch: int, member: str | None) -> Any:
        return client.request(OffsetFetchRequest(groups=[_FG(
            group_id=group, member_id=member, member_epoch=epoch, topics=None)],
            require_stable=False), 9).groups[0]

    good = fetch(e, m)
    assert good.error_code == 0
    assert good.topics[0].partitions[0].committed_offset == 1
    assert (fetch(e - 1, m).error_code, fetch(e - 1, m).topics) == (
        ErrorCode.STALE_MEMBER_EPOCH, [])
    assert fetch(e, "zzz").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert fetch(-1, None).error_code == 0  # admin clients are not checked

    deleted = client.request(OffsetDeleteRequest(group_id=group, topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name=topic, partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
                partition_index=0)])]), 0)
    assert deleted.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


def test_classic_apis_see_consumer_groups_as_kafka_does(client: RawClient, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    j = join(client, group, topic)
    v5 = client.request(DescribeGroupsRequest(groups=[group],
                                              include_authorized_operations=False), 5)
    assert [(g.error_code, g.group_state, g.members) for g in v5.groups] == [(0, "Dead", [])]
    v6 = client.request(DescribeGroupsRequest(groups=[group],
                                              include_authorized_operations=False), 6)
    assert [(g.error_code, g.error_message) for g in v6.groups] == [
        (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} is not a classic group.")]
    listed = client.request(ListGroupsRequest(states_filter=["stable"],
                                              types_filter=["consumer"]), 5)
    assert [(g.protocol_type, g.group_state, g.group_type) for g in listed.groups
            if g.group_id == group] == [("consumer", "Stable", "consumer")]
    # Kafka 4.3 would migrate the group (online upgrade); without migration, a classic
    # member cannot join a consumer group.
    classic = client.request(JoinGroupRequest(
        group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        group_instance_id=None, protocol_type="consumer", protocols=[
            JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
        reason=None), 9)
    assert classic.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

    described = client.request(Describe(group_ids=[group, "", "no-such-group"],
                                        include_authorized_operations=False), 1)
    ours, empty, missing = described.groups
    assert (ours.error_code, ours.group_state, ours.assignor_name) == (0, "Stable", "uniform")
    (member,) = ours.members
    assert (member.member_id, member.member_epoch, member.member_type) == (
        j.member_id, j.member_epoch, 1)
    assert member.assignment.topic_partitions[0].topic_name == topic
    assert empty.error_code == ErrorCode.INVALID_GROUP_ID
    assert (missing.error_code, missing.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND, "Group no-such-group not found.")

    def delete() -> int:
        r = client.request(DeleteGroupsRequest(groups_names=[group]), 2)
        return int(r.results[0].error_code)

    assert delete() == ErrorCode.NON_EMPTY_GROUP
    assert beat(client, group, j.member_id, -1).error_code == 0
    assert delete() == 0
    assert delete() == ErrorCode.GROUP_ID_NOT_FOUND
