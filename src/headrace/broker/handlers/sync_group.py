"""SyncGroup (key 14), versions 0-5: the leader's assignments complete a rebalance; every
member gets its own. Followers wait for the leader. Errors: UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL (v5 protocol
type/name mismatch), REBALANCE_IN_PROGRESS.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import SyncGroupRequest, SyncGroupResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import KafkaProtocolError


@handles(SyncGroupRequest, SyncGroupResponse, max_version=5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    groups = ctx.state.groups
    try:
        ctx.require(AclOperation.READ, ResourceType.GROUP, request.group_id)
        assignment = await groups.sync(
            request.group_id, request.generation_id, request.member_id,
            request.group_instance_id if v >= 3 else None,
            request.protocol_type if v >= 5 else None,
            request.protocol_name if v >= 5 else None,
            {a.member_id: bytes(a.assignment) for a in request.assignments})
        code = 0
    except KafkaProtocolError as e:
        assignment, code = b"", e.code
    group = groups.group(request.group_id)
    return SyncGroupResponse(
        throttle_time_ms=0, error_code=code,
        protocol_type=group.protocol_type if group else None,
        protocol_name=group.protocol_name if group else None, assignment=assignment)
