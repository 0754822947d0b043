"""OffsetCommit (key 8), versions 2-10 (v0-1 removed in Kafka 4 by KIP-896: they
close the connection as in Kafka 4; v10 names topics by id, in the request and the
answer; an id no topic has answers UNKNOWN_TOPIC_ID for each of its partitions).

Commits from group members are fenced like Kafka's: UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS while assignments are
being handed out. A commit with generation -1 and no member id is a "simple" commit from
a consumer using no group membership, accepted while the group has no members.
For KIP-848 consumer groups the field is the member epoch: UNKNOWN_MEMBER_ID for a
non-member, STALE_MEMBER_EPOCH for an epoch newer than the member's or an older one
naming a partition the member did not own at that epoch (KIP-1251), and
UNSUPPORTED_VERSION below v9, as Kafka 4.3 answers.
Metadata over ``offset.metadata.max.bytes`` gets OFFSET_METADATA_TOO_LARGE for that
partition. Offsets go to ``__consumer_offsets`` before the answer (fsynced first when
the broker runs with ``--fsync``). With ACLs: READ on the group (else every partition
answers GROUP_AUTHORIZATION_FAILED) and on each topic (else TOPIC_AUTHORIZATION_FAILED).
Not implemented: retention_time_ms (v2-4) expiry.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

from headrace.broker.context import RequestContext
from headrace.broker.handlers._offsets import collect_commits, requested
from headrace.broker.registry import DeferredResponse, handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

_Topic = OffsetCommitResponse.OffsetCommitResponseTopic
_Partition = _Topic.OffsetCommitResponsePartition
_ZERO_ID = uuid.UUID(int=0)


@dataclass(frozen=True)
class _Named:
    """A request topic with its name (v10: resolved from its id; "" when unknown)."""

    name: str
    topic_id: uuid.UUID
    partitions: Any


def _named(ctx: RequestContext, topics: Any) -> list[_Named]:
    if ctx.api_version < 10:
        return [_Named(t.name, _ZERO_ID, t.partitions) for t in topics]
    names = ctx.state.topics_by_id()
    return [_Named(names.get(t.topic_id, ""), t.topic_id, t.partitions) for t in topics]


@handles(OffsetCommitRequest, OffsetCommitResponse, max_version=10, min_version=2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    state = ctx.state
    v = ctx.api_version
    topics = _named(ctx, request.topics)
    epoch = request.generation_id_or_member_epoch
    member_id = request.member_id
    try:
        ctx.require(AclOperation.READ, ResourceType.GROUP, request.group_id)
        if not state.consumer_groups.check_offset_commit(request.group_id, member_id, epoch, v,
                                                         requested(topics)):
            state.groups.check_commit(request.group_id, epoch, member_id,
                                      request.group_instance_id if v >= 7 else None)
        group_code = 0
    except KafkaProtocolError as e:
        group_code = e.code
    accepted, codes = collect_commits(topics, group_code,
                                      state.config.offset_metadata_max_bytes, v >= 6,
                                      state.logs, ctx.may_read_topic)
    for t in topics:
        if v >= 10 and not t.name:
            for p in t.partitions:
                codes[(t.name, p.partition_index)] = group_code or ErrorCode.UNKNOWN_TOPIC_ID
    written = None
    if accepted:
        try:
            written = state.offsets.commit(request.group_id, accepted)
            state.remember_group(request.group_id)
        except (HeadraceError, OSError):
            for tp in accepted:
                codes[tp] = ErrorCode.COORDINATOR_NOT_AVAILABLE

    def build(error: BaseException | None) -> Any:
        return OffsetCommitResponse(throttle_time_ms=0, topics=[
            _Topic(name=t.name, topic_id=t.topic_id, partitions=[
                _Partition(partition_index=p.partition_index,
                           error_code=(ErrorCode.COORDINATOR_NOT_AVAILABLE
                                       if error is not None and codes[(t.name, p.partition_index)] == 0
                                       else codes[(t.name, p.partition_index)]))
                for p in t.partitions])
            for t in topics])

    if written is not None and written.config.flush_on_ack:
        return DeferredResponse(state.flusher.request({written}), build)
    return build(None)
