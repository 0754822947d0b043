"""InitProducerId (key 22), versions 0-5.

Idempotent producers (no transactional id): always a fresh producer id (unique across
restarts) at epoch 0, as Apache Kafka answers. A producer id/epoch hint (v3+, KIP-360) is
ignored for them: an idempotent producer bumps its epoch locally, and the broker keeps no
owner per producer id to check a hint against, so granting "the same id at the next
epoch" would let any client take over another producer's id. Transactional producers: the transaction coordinator maps the
transactional id to its producer id and bumps the epoch, fencing older incarnations and
aborting a transaction they left open (see ``headrace.broker.txn.coordinator``).
With ACLs: WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
(else CLUSTER_AUTHORIZATION_FAILED), as Kafka 2.8+.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from headrace.broker.context import RequestContext
from headrace.broker.handlers._txn import fenced_code
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode, KafkaProtocolError


@handles(InitProducerIdRequest, InitProducerIdResponse, max_version=5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    pid = request.producer_id if v >= 3 else -1
    epoch = request.producer_epoch if v >= 3 else -1
    if request.transactional_id is not None:
        try:
            ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                        request.transactional_id)
            pid, epoch = ctx.state.txns.init_producer_id(
                request.transactional_id, request.transaction_timeout_ms, pid, epoch)
        except KafkaProtocolError as e:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=fenced_code(e.code, v, 4),
                                          producer_id=-1, producer_epoch=-1)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid,
                                      producer_epoch=epoch)
    if not (ctx.allowed(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
            or ctx.state.authorizer.authorize_any(ctx.session.principal, ctx.host,
                                                  AclOperation.WRITE, ResourceType.TOPIC)):
        return InitProducerIdResponse(throttle_time_ms=0, producer_id=-1, producer_epoch=-1,
                                      error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0,
                                  producer_id=ctx.state.logs.allocate_producer_id(),
                                  producer_epoch=0)
