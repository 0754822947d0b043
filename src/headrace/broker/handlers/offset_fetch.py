"""OffsetFetch (key 9), versions 1-10 (v0 removed in Kafka 4 by KIP-896: it closes
the connection as in Kafka 4; v8+: several groups per request; v10 names topics by
id).

Answers the committed offsets of a group: the requested partitions (unknown ones get
offset -1), or every committed partition when the topic list is null. An unknown group
has no offsets (not an error, as in Kafka). With ``require_stable`` (v7+), a partition
whose offset an open transaction has staged answers UNSTABLE_OFFSET_COMMIT (the client
retries once the transaction ends). v9+: a member of a KIP-848 consumer group names
itself and its epoch; a non-member gets UNKNOWN_MEMBER_ID, another epoch
STALE_MEMBER_EPOCH (group-level error, no topics); epoch -1 (admin clients) is not checked.
With ACLs: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED, per group from v8, for
the request from v2, per partition before) and on each topic (a named topic answers
TOPIC_AUTHORIZATION_FAILED per partition; "every committed partition" leaves the topics
out). v10 names topics by id, in the request and the answer: an id no topic has answers
UNKNOWN_TOPIC_ID for each of its partitions; asked for every committed partition, the
offsets of topics that no longer exist are left out (they have no id to name them by).
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from headrace.broker.context import RequestContext
from headrace.broker.groups.offsets import CommittedOffset
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

_OldTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_OldPartition = _OldTopic.OffsetFetchResponsePartition
_Group = OffsetFetchResponse.OffsetFetchResponseGroup
_Topic = _Group.OffsetFetchResponseTopics
_Partition = _Topic.OffsetFetchResponsePartitions
_NONE = CommittedOffset(-1, -1, "", -1)
_ZERO_ID = uuid.UUID(int=0)


def _code(ctx: RequestContext, group_id: str, topic: str, partition: int,
          require_stable: bool) -> int:
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
        return int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if require_stable and ctx.state.offsets.is_unstable(group_id, (topic, partition)):
        return int(ErrorCode.UNSTABLE_OFFSET_COMMIT)
    return 0


def _lookup(ctx: RequestContext, group_id: str,
            topics: list[tuple[str, list[int]]] | None) -> list[tuple[str, list[tuple[int, CommittedOffset]]]]:
    committed = ctx.state.offsets.committed(group_id)
    if topics is None:
        by_topic: dict[str, list[tuple[int, CommittedOffset]]] = {}
        for (t, p), c in sorted(committed.items()):
            if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, t):
                continue
            by_topic.setdefault(t, []).append((p, c))
        return list(by_topic.items())
    return [(t, [(p, committed.get((t, p), _NONE)) for p in parts]) for t, parts in topics]


def _v10_topics(ctx: RequestContext, topics: Any) -> tuple[list[tuple[str, list[int]]] | None,
                                                             dict[uuid.UUID, list[int]]]:
    """v10's requested topics: ``(by name, unknown id -> partitions)``."""
    if topics is None:
        return None, {}
    names = ctx.state.topics_by_id()
    known: list[tuple[str, list[int]]] = []
    unknown: dict[uuid.UUID, list[int]] = {}
    for t in topics:
        name = names.get(t.topic_id)
        if name is None:
            unknown.setdefault(t.topic_id, []).extend(t.partition_indexes)
        else:
            known.append((name, list(t.partition_indexes)))
    return known, unknown


def _topic_id(ctx: RequestContext, name: str) -> uuid.UUID | None:
    topic = ctx.state.logs.topics.get(name)
    return None if topic is None else topic.topic_id


@handles(OffsetFetchRequest, OffsetFetchResponse, max_version=10, min_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    stable = ctx.api_version >= 7 and bool(request.require_stable)
    if ctx.api_version >= 8:
        groups = []
        for g in request.groups:
            if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
                groups.append(_Group(group_id=g.group_id, topics=[],
                                     error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
                continue
            if ctx.api_version >= 9:
                try:
                    ctx.state.consumer_groups.check_offset_fetch(g.group_id, g.member_id,
                                                                 g.member_epoch)
                except KafkaProtocolError as e:
                    groups.append(_Group(group_id=g.group_id, error_code=e.code, topics=[]))
                    continue
            unknown: dict[uuid.UUID, list[int]] = {}
            if ctx.api_version >= 10:
                wanted, unknown = _v10_topics(ctx, g.topics)
            else:
                wanted = None if g.topics is None else [(t.name, list(t.partition_indexes))
                                                        for t in g.topics]
            found = [(t, _topic_id(ctx, t), parts) for t, parts in _lookup(ctx, g.group_id, wanted)]
            if ctx.api_version >= 10:
                found = [(t, tid, parts) for t, tid, parts in found if tid is not None]
            topics = [
                _Topic(name=t, topic_id=tid or _ZERO_ID, partitions=[
                    _Partition(partition_index=p, committed_offset=c.offset,
                               committed_leader_epoch=c.leader_epoch,
                               metadata=c.metadata,
                               error_code=_code(ctx, g.group_id, t, p, stable))
                    for p, c in parts])
                for t, tid, parts in found]
            topics += [_Topic(name="", topic_id=tid, partitions=[
                _Partition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                           metadata="", error_code=ErrorCode.UNKNOWN_TOPIC_ID) for p in parts])
                for tid, parts in unknown.items()]
            groups.append(_Group(group_id=g.group_id, error_code=0, topics=topics))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    wanted = None if request.topics is None else [(t.name, list(t.partition_indexes))
                                                  for t in request.topics]
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id):
        denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return OffsetFetchResponse(throttle_time_ms=0, error_code=denied, topics=[
            _OldTopic(name=t, partitions=[
                _OldPartition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                              metadata="", error_code=denied) for p in parts])
            for t, parts in wanted or []])
    return OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=[
        _OldTopic(name=t, partitions=[
            _OldPartition(partition_index=p, committed_offset=c.offset,
                          committed_leader_epoch=c.leader_epoch, metadata=c.metadata,
                          error_code=_code(ctx, request.group_id, t, p, stable))
            for p, c in parts])
        for t, parts in _lookup(ctx, request.group_id, wanted)])
