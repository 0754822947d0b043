"""DescribeGroups (key 15), versions 0-6: state, protocol and members (with metadata and
assignment once Stable) of classic groups. Unknown groups, and KIP-848 consumer groups,
are described as Dead with no members up to v5; v6 answers GROUP_ID_NOT_FOUND with a
message for them, as Kafka 4.3 does. With ACLs a group the client may not DESCRIBE
answers GROUP_AUTHORIZATION_FAILED. Authorized operations (v3+, when asked): those the
client may perform on the group."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse

from headrace.broker.context import RequestContext
from headrace.broker.groups.group import GroupState
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode

_Group = DescribeGroupsResponse.DescribedGroup
_Member = _Group.DescribedGroupMember


@handles(DescribeGroupsRequest, DescribeGroupsResponse, max_version=6)
async def handle(ctx: RequestContext, request: Any) -> Any:
    described = []
    asked = getattr(request, "include_authorized_operations", False)
    for group_id in request.groups:
        operations = ctx.operations(asked, ResourceType.GROUP, group_id)
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(_Group(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                    group_id=group_id, group_state="", protocol_type="",
                                    protocol_data="", members=[]))
            continue
        if not group_id:
            described.append(_Group(error_code=ErrorCode.INVALID_GROUP_ID, group_id=group_id,
                                    group_state="", protocol_type="", protocol_data="",
                                    members=[]))
            continue
        group = ctx.state.groups.group(group_id)
        if group is None:
            code, message = 0, None
            if ctx.api_version >= 6:
                code = ErrorCode.GROUP_ID_NOT_FOUND
                message = (f"Group {group_id} is not a classic group."
                           if ctx.state.consumer_groups.group(group_id) is not None
                           else f"Group {group_id} not found.")
            described.append(_Group(error_code=code, error_message=message, group_id=group_id,
                                    group_state=GroupState.DEAD.value, protocol_type="",
                                    protocol_data="", members=[],
                                    authorized_operations=operations))
            continue
        # As Kafka: protocol, metadata and assignments only once Stable (during a
        # rebalance the members may not all speak the old protocol any more).
        stable = group.state is GroupState.STABLE
        protocol = (group.protocol_name or "") if stable else ""
        members = [
            _Member(member_id=m.member_id, group_instance_id=m.group_instance_id,
                    client_id=m.client_id, client_host=m.client_host,
                    member_metadata=m.subscription(protocol) if stable else b"",
                    member_assignment=m.assignment if stable else b"")
            for m in group.members.values()]
        described.append(_Group(error_code=0, group_id=group_id, group_state=group.state.value,
                                protocol_type=group.protocol_type or "",
                                protocol_data=protocol, members=members,
                                authorized_operations=operations))
    return DescribeGroupsResponse(throttle_time_ms=0, groups=described)
