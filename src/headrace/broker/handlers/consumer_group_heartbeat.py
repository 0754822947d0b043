"""ConsumerGroupHeartbeat (key 68), versions 0-1: the KIP-848 consumer group protocol.

Join (member epoch 0), heartbeat, leave (-1) and static leave (-2); the answer carries the
member epoch, the heartbeat interval (``group.consumer.heartbeat.interval.ms``) and, when
it changed or the request was a full one, the member's assignment by topic id. v1 members
generate their own member id (KIP-1082); v0 members get one. The rules (epochs, server
assignors ``uniform``/``range``, pending revocation, static membership, regex
subscriptions, fencing) live in ``groups.consumer_coordinator``, whose docstring lists
what is not implemented. Group state persists in ``__consumer_offsets`` before the answer
(fsynced first when the broker runs with ``--fsync``), so members keep their ids, epochs
and assignments across a broker restart. With ACLs: READ on the group (else
GROUP_AUTHORIZATION_FAILED) and DESCRIBE on each subscribed topic name (else
TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from headrace.broker.context import RequestContext
from headrace.broker.groups.assignors import MemberAssignment
from headrace.broker.groups.consumer_coordinator import Heartbeat
from headrace.broker.registry import DeferredResponse, handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

_Assignment = ConsumerGroupHeartbeatResponse.Assignment
_TopicPartitions = _Assignment.TopicPartitions


def _owned(topic_partitions: Any) -> MemberAssignment | None:
    if topic_partitions is None:
        return None
    owned: MemberAssignment = {}
    for t in topic_partitions:
        if t.partitions:
            owned[t.topic_id] = owned.get(t.topic_id, frozenset()) | frozenset(t.partitions)
    return owned


@handles(ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, max_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    hb = Heartbeat(
        group_id=request.group_id, member_id=request.member_id,
        member_epoch=request.member_epoch, instance_id=request.instance_id,
        rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex if v >= 1 else None,
        server_assignor=request.server_assignor, owned=_owned(request.topic_partitions),
        client_id=ctx.client_id or "", client_host="/" + ctx.peer.rsplit(":", 1)[0],
        api_version=v)
    # Where the group's state is written: a heartbeat that changed it answers once the
    # write is durable as a commit is.
    state_log = ctx.state.offsets.partition_for(request.group_id)
    state_end = state_log.log_end_offset
    try:
        ctx.require(AclOperation.READ, ResourceType.GROUP, request.group_id)
        for name in request.subscribed_topic_names or ():
            ctx.require(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        result = ctx.state.consumer_groups.heartbeat(hb)
    except KafkaProtocolError as e:
        return _error(e.code, str(e) or None)
    assignment = None
    if result.assignment is not None:
        assignment = _Assignment(topic_partitions=[
            _TopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(result.assignment.items())])
    response = ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=0, error_message=None, member_id=result.member_id,
        member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=assignment)
    if state_log.log_end_offset != state_end and state_log.config.flush_on_ack:
        return DeferredResponse(
            ctx.state.flusher.request({state_log}),
            lambda error: response if error is None else _error(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, None))
    return response


def _error(code: int, message: str | None) -> Any:
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=code, error_message=message, member_id=None,
        member_epoch=0, heartbeat_interval_ms=0, assignment=None)
