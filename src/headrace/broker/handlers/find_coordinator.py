"""FindCoordinator (key 10), versions 0-4: this broker coordinates every group (key
type 0) and every transactional id (key type 1). v4+ batches keys (KIP-699). Other key
types (share groups) get INVALID_REQUEST. With ACLs the key needs DESCRIBE on the group
(else GROUP_AUTHORIZATION_FAILED) or transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from headrace.broker.context import DENIED_CODES, RequestContext
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode

GROUP, TRANSACTION = 0, 1


def _answer(ctx: RequestContext, key_type: int,
            key: str) -> tuple[int, str | None, int, str, int]:
    """(error code, message, node id, host, port) for one key."""
    state = ctx.state
    if key_type in (GROUP, TRANSACTION):
        rtype = ResourceType.GROUP if key_type == GROUP else ResourceType.TRANSACTIONAL_ID
        if not ctx.allowed(AclOperation.DESCRIBE, rtype, key):
            return DENIED_CODES[rtype], None, -1, "", -1
        return 0, None, state.config.node_id, ctx.listener.advertised_host, ctx.listener.port
    return ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}", -1, "", -1


@handles(FindCoordinatorRequest, FindCoordinatorResponse, max_version=4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    key_type = request.key_type if ctx.api_version >= 1 else GROUP
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            code, message, node, host, port = _answer(ctx, key_type, key)
            coordinators.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=code,
                error_message=message))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    code, message, node, host, port = _answer(ctx, key_type, request.key)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                   node_id=node, host=host, port=port)
