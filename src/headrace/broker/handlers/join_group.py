"""JoinGroup (key 11), versions 0-9: see ``headrace.broker.groups.coordinator``.

The response waits for the rebalance to complete (the connection's later requests wait
with it, as in Kafka). v4+ members without an id get MEMBER_ID_REQUIRED first (KIP-394).
``skip_assignment`` (v9, KIP-814) is set when a static leader rejoins a Stable group with
unchanged protocols: it gets its old assignment back without a rebalance. With ACLs it
needs READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse

from headrace.broker.context import RequestContext
from headrace.broker.groups.coordinator import JoinRequest
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode

_Member = JoinGroupResponse.JoinGroupResponseMember


@handles(JoinGroupRequest, JoinGroupResponse, max_version=9)
async def handle(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return JoinGroupResponse(
            throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            generation_id=-1, protocol_type=None, protocol_name=None, leader="",
            skip_assignment=False, member_id=request.member_id, members=[])
    req = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if v >= 5 else None,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if v >= 1 else request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        client_id=ctx.client_id or "",
        client_host="/" + ctx.peer.rsplit(":", 1)[0],
        require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9,
    )
    r = await ctx.state.groups.join(req)
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=r.error_code, generation_id=r.generation_id,
        protocol_type=r.protocol_type, protocol_name=r.protocol_name, leader=r.leader,
        skip_assignment=r.skip_assignment, member_id=r.member_id,
        members=[_Member(member_id=m, group_instance_id=i, metadata=md) for m, i, md in r.members])
