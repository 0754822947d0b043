"""AddPartitionsToTxn (key 24), versions 0-3 (v4+'s batched broker verification,
KIP-890, is not served). Puts partitions in the producer's ongoing transaction. With
ACLs: WRITE on the transactional id (else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each topic (else that topic's partitions
answer TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED, as Kafka).
Internal topics are never added by a client: TOPIC_AUTHORIZATION_FAILED whatever the
ACLs, as Kafka (``internal_topics``)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

from headrace.broker import internal_topics
from headrace.broker.context import RequestContext
from headrace.broker.handlers._txn import fenced_code
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

_Topic = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_Partition = _Topic.AddPartitionsToTxnPartitionResult


@handles(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, max_version=3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    denied = {t for t, _p in wanted if internal_topics.is_internal(t)
              or not ctx.allowed(AclOperation.WRITE, ResourceType.TOPIC, t)}
    try:
        ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                    request.v3_and_below_transactional_id)
        codes: dict[tuple[str, int], int]
        if denied:
            codes = {tp: (ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied
                          else ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
        else:
            codes = ctx.state.txns.add_partitions(
                request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch, wanted)
    except KafkaProtocolError as e:
        codes = dict.fromkeys(wanted, fenced_code(e.code, ctx.api_version, 2))
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append(_Partition(partition_index=p,
                                                         partition_error_code=code))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=[
        _Topic(name=topic, results_by_partition=parts) for topic, parts in by_topic.items()])
