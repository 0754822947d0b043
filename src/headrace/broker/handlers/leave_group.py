"""LeaveGroup (key 13), versions 0-5: removes members (v3+: several at once, by member id
or group instance id) and rebalances the rest. Each member answers for itself (v3+)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import LeaveGroupRequest, LeaveGroupResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

_Member = LeaveGroupResponse.MemberResponse


@handles(LeaveGroupRequest, LeaveGroupResponse, max_version=5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.state.groups
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return LeaveGroupResponse(throttle_time_ms=0, members=[],
                                  error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if ctx.api_version < 3:
        try:
            groups.leave(request.group_id, request.member_id, None)
            code = 0
        except KafkaProtocolError as e:
            code = e.code
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code, members=[])
    results = []
    for m in request.members:
        try:
            groups.leave(request.group_id, m.member_id, m.group_instance_id)
            code = 0
        except KafkaProtocolError as e:
            code = e.code
        results.append(_Member(member_id=m.member_id, group_instance_id=m.group_instance_id,
                               error_code=code))
    top = results[0].error_code if len(results) == 1 else 0
    return LeaveGroupResponse(throttle_time_ms=0, error_code=top, members=results)
