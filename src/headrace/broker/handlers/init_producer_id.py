"""InitProducerId (key 22), versions 0-5, for idempotent producers.

Without a transactional id: a fresh producer id (unique across restarts) at epoch 0; with
the producer's current id and epoch (v3+, KIP-360) the same id at the next epoch, so a
producer can reset its sequences without losing its identity. Transactional ids need the
transaction coordinator, which is not implemented yet: they get
COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.errors import ErrorCode

MAX_EPOCH = 32767


@handles(InitProducerIdRequest, InitProducerIdResponse, max_version=5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        return InitProducerIdResponse(throttle_time_ms=0,
                                      error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      producer_id=-1, producer_epoch=-1)
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if ctx.api_version >= 3 and pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid,
                                      producer_epoch=epoch + 1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0,
                                  producer_id=ctx.state.logs.allocate_producer_id(),
                                  producer_epoch=0)
