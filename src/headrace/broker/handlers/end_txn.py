"""EndTxn (key 26), versions 0-4 (capped below transactions v2, KIP-890): commit or abort.

Markers go to every partition of the transaction before the answer (fsynced first when
the broker runs with ``--fsync``). A retry of the same outcome succeeds; the opposite
outcome gets INVALID_TXN_STATE. With ACLs: WRITE on the transactional id.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import EndTxnRequest, EndTxnResponse

from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.handlers._txn import fenced_code
from headrace.broker.registry import DeferredResponse, handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import KafkaProtocolError


@handles(EndTxnRequest, EndTxnResponse, max_version=4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    state = ctx.state
    try:
        ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
        written = state.txns.end_txn(request.transactional_id, request.producer_id,
                                     request.producer_epoch, bool(request.committed))
    except KafkaProtocolError as e:
        return EndTxnResponse(throttle_time_ms=0,
                              error_code=fenced_code(e.code, ctx.api_version, 2))

    def build(error: BaseException | None) -> Any:
        code = 0 if error is None else error_code_for(error)
        return EndTxnResponse(throttle_time_ms=0, error_code=code)

    if state.config.log.flush_on_ack and written:
        return DeferredResponse(state.flusher.request(written), build)
    return build(None)
