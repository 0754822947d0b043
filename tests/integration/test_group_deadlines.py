"""Group deadlines are kept to the millisecond: a request that arrives after a member's
session deadline finds the member gone, however late a timer would fire on a busy loop
(librdkafka's 0081 deletes a group of closed static members exactly one session timeout
after their last OffsetCommit). Raw requests, so the test controls the timing exactly."""

from __future__ import annotations

import time
import uuid

from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest
from kafka.protocol.consumer import JoinGroupRequest, OffsetCommitRequest, SyncGroupRequest

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.rawclient import RawClient
from tests.integration.test_groups import assignment, create_topic, subscription

ROUNDS = 3


def _static_member_commits(client: RawClient, group: str, topic: str,
                           session_ms: int) -> float:
    """Join ``group`` as a static member, sync, commit; return when the commit's response
    arrived (monotonic), i.e. after the broker restarted the session."""
    joined = client.request(JoinGroupRequest(
        group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=session_ms,
        member_id="", group_instance_id="static-0", protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
            name="range", metadata=subscription(topic))]), 5)
    assert joined.error_code == 0, joined
    synced = client.request(SyncGroupRequest(
        group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id="static-0", assignments=[
            SyncGroupRequest.SyncGroupRequestAssignment(member_id=joined.member_id,
                                                        assignment=assignment(topic, [0]))]), 3)
    assert synced.error_code == 0, synced
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    committed = client.request(OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=joined.generation_id,
        member_id=joined.member_id, group_instance_id="static-0",
        topics=[T(name=topic, partitions=[T.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1,
            committed_metadata="")])]), 8)
    at = time.monotonic()
    assert committed.topics[0].partitions[0].error_code == 0, committed
    return at


def test_a_static_member_is_gone_when_delete_groups_arrives_at_its_session_timeout(
        broker: EmbeddedBroker, topic_name: str) -> None:
    """The member's last request is an OffsetCommit (which restarts its session, as in
    Kafka); DeleteGroups sent exactly one session timeout after the commit's response
    finds the group Empty and deletes it. Repeated: each round is a race lost if expiry
    waited for a timer tick."""
    create_topic(broker.bootstrap_servers, topic_name, 1)
    # Long enough for the join/sync/commit steps on a loaded machine (scaled); the race
    # is against the session itself, so the wait below is exactly the session.
    session_ms = int(scaled(1500))
    for _ in range(ROUNDS):
        group = f"deadline-{uuid.uuid4().hex[:8]}"
        member, admin = RawClient(broker.bootstrap_servers), RawClient(broker.bootstrap_servers)
        try:
            committed_at = _static_member_commits(member, group, topic_name, session_ms)
            time.sleep(max(0.0, committed_at + session_ms / 1000 - time.monotonic()))
            deleted = admin.request(DeleteGroupsRequest(groups_names=[group]), 2)
            assert [r.error_code for r in deleted.results] == [0], deleted
            described = admin.request(DescribeGroupsRequest(groups=[group]), 5)
            assert described.groups[0].group_state == "Dead", described
        finally:
            member.close()
            admin.close()
