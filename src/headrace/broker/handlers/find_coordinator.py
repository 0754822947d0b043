"""FindCoordinator (key 10), versions 0-4: advertised, but no coordinator exists yet.

Every lookup (group or transaction) answers COORDINATOR_NOT_AVAILABLE, a retriable
error, until the group coordinator lands. It is served rather than left out because
librdkafka only enables features such as LZ4 compression for brokers that advertise it.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.errors import ErrorCode

_MESSAGE = "no group or transaction coordinator on this broker yet"


@handles(FindCoordinatorRequest, FindCoordinatorResponse, max_version=4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if ctx.api_version >= 4:
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=-1, host="", port=-1,
                                                error_code=code, error_message=_MESSAGE)
            for k in request.coordinator_keys])
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=code, error_message=_MESSAGE,
                                   node_id=-1, host="", port=-1)
