"""OffsetDelete (key 47), version 0: deletes a group's committed offsets for some
partitions. Refused per partition with GROUP_SUBSCRIBED_TO_TOPIC while a live member
is assigned (subscribed to) that topic; GROUP_ID_NOT_FOUND for an unknown group.
Subscriptions are read from the members' consumer-protocol metadata (classic groups) or
their resolved topic names and regexes (KIP-848 consumer groups). With ACLs: DELETE on
the group (else GROUP_AUTHORIZATION_FAILED) and READ on each topic (else
TOPIC_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetDeleteRequest, OffsetDeleteResponse

from headrace.broker.context import RequestContext
from headrace.broker.groups.group import Group
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.consumer_protocol import subscribed_topics
from headrace.protocol.errors import ErrorCode

_Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_Partition = _Topic.OffsetDeleteResponsePartition


def _subscribed(group: Group) -> set[str]:
    if group.protocol_type != "consumer":
        return set()
    topics: set[str] = set()
    for m in group.members.values():
        topics |= subscribed_topics(m.subscription(group.protocol_name))
    return topics


@handles(OffsetDeleteRequest, OffsetDeleteResponse, max_version=0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                    throttle_time_ms=0, topics=[])
    consumer_group = ctx.state.consumer_groups.group(request.group_id)
    group = ctx.state.groups.group(request.group_id)
    if consumer_group is not None:
        names = ctx.state.topics_by_id()
        subscribed = {names[t] for subs in
                      ctx.state.consumer_groups.subscriptions(consumer_group).values()
                      for t in subs if t in names}
    elif group is None:
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND, throttle_time_ms=0,
                                    topics=[])
    else:
        subscribed = _subscribed(group)
    deletable = []
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if not ctx.may_read_topic(t.name):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif t.name in subscribed:
                code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                code = ErrorCode.NONE
                deletable.append((t.name, p.partition_index))
            parts.append(_Partition(partition_index=p.partition_index, error_code=code))
        topics.append(_Topic(name=t.name, partitions=parts))
    ctx.state.offsets.delete_offsets(request.group_id, deletable)
    return OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=topics)
