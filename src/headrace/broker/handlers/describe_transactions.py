"""DescribeTransactions (key 65), version 0: state, producer id and epoch, timeout, start
time and partitions of each transactional id; TRANSACTIONAL_ID_NOT_FOUND if unknown. With
ACLs: DESCRIBE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and
only the topics the client may DESCRIBE are listed."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeTransactionsRequest, DescribeTransactionsResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode

_State = DescribeTransactionsResponse.TransactionState
_Topic = _State.TopicData


@handles(DescribeTransactionsRequest, DescribeTransactionsResponse, max_version=0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    out = []
    for tid in request.transactional_ids:
        t = ctx.state.txns.txns.get(tid)
        denied = not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)
        if t is None or denied:
            out.append(_State(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                              if denied else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                              transactional_id=tid, transaction_state="",
                              transaction_timeout_ms=0, transaction_start_time_ms=-1,
                              producer_id=-1, producer_epoch=-1, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(t.partitions):
            if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
                continue
            by_topic.setdefault(topic, []).append(p)
        out.append(_State(error_code=0, transactional_id=tid, transaction_state=t.state.label,
                          transaction_timeout_ms=t.timeout_ms,
                          transaction_start_time_ms=t.start_ms, producer_id=t.producer_id,
                          producer_epoch=t.producer_epoch,
                          topics=[_Topic(topic=k, partitions=v) for k, v in by_topic.items()]))
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=out)
