"""ConsumerGroupDescribe (key 69), versions 0-1 (v1: member type, always 1 "consumer").

Describes KIP-848 consumer groups: state (Empty, Assigning, Reconciling, Stable), group and
assignment epochs, the assignor in use, and per member its subscription, current and
target assignment (topic ids with names). An empty group id answers INVALID_GROUP_ID; an
unknown group, or a classic one, GROUP_ID_NOT_FOUND, as Kafka does. Authorized operations
are not computed (reported as not requested).
"""

from __future__ import annotations

import uuid
from typing import Any

from headrace.broker.context import RequestContext
from headrace.broker.groups.assignors import MemberAssignment
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode
from headrace.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)

_Group = ConsumerGroupDescribeResponse.DescribedGroup
_Member = _Group.Member
_Assignment = _Member.Assignment
_TopicPartitions = _Assignment.TopicPartitions
_NOT_REQUESTED = -2147483648
_CONSUMER_MEMBER_TYPE = 1


def _assignment(assignment: MemberAssignment, names: dict[uuid.UUID, str]) -> Any:
    return _Assignment(topic_partitions=[
        _TopicPartitions(topic_id=t, topic_name=names.get(t, ""), partitions=sorted(ps))
        for t, ps in sorted(assignment.items())])


def _error(group_id: str, code: int, message: str | None) -> Any:
    return _Group(error_code=code, error_message=message, group_id=group_id, group_state="",
                  group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
                  authorized_operations=_NOT_REQUESTED)


@handles(ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, max_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    names = ctx.state.topics_by_id()
    described = []
    for group_id in request.group_ids:
        if not group_id:
            described.append(_error(group_id, ErrorCode.INVALID_GROUP_ID, None))
            continue
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
            continue
        group = ctx.state.consumer_groups.group(group_id)
        if group is None:
            message = (f"Group {group_id} is not a consumer group."
                       if ctx.state.groups.group(group_id) is not None
                       else f"Group {group_id} not found.")
            described.append(_error(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message))
            continue
        members = [
            _Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                    member_epoch=m.member_epoch, client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=list(m.subscribed_topic_names),
                    subscribed_topic_regex=m.subscribed_topic_regex or "",
                    assignment=_assignment(m.assigned, names),
                    target_assignment=_assignment(group.target.get(m.member_id, {}), names),
                    member_type=_CONSUMER_MEMBER_TYPE)
            for m in group.members.values()]
        described.append(_Group(
            error_code=0, error_message=None, group_id=group_id,
            group_state=group.state.value, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.assignor_name or group.preferred_assignor("uniform"),
            members=members, authorized_operations=_NOT_REQUESTED))
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=described)
