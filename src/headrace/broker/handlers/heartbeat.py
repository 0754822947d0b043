"""Heartbeat (key 12), versions 0-4: keeps a member's session alive; answers
REBALANCE_IN_PROGRESS while the group rebalances, so the member rejoins."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import KafkaProtocolError


@handles(HeartbeatRequest, HeartbeatResponse, max_version=4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    try:
        ctx.require(AclOperation.READ, ResourceType.GROUP, request.group_id)
        ctx.state.groups.heartbeat(request.group_id, request.generation_id, request.member_id,
                                   request.group_instance_id if ctx.api_version >= 3 else None)
        code = 0
    except KafkaProtocolError as e:
        code = e.code
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)
