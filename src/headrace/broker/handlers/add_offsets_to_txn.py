"""AddOffsetsToTxn (key 25), versions 0-3: puts a group's offsets partition in the
producer's transaction, before TxnOffsetCommit (send_offsets_to_transaction). With ACLs:
WRITE on the transactional id and READ on the group."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse

from headrace.broker.context import RequestContext
from headrace.broker.handlers._txn import fenced_code
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import KafkaProtocolError


@handles(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, max_version=3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    try:
        ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
        ctx.require(AclOperation.READ, ResourceType.GROUP, request.group_id)
        ctx.state.txns.add_offsets(request.transactional_id, request.producer_id,
                                   request.producer_epoch, request.group_id)
        code = 0
    except KafkaProtocolError as e:
        code = fenced_code(e.code, ctx.api_version, 2)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)
