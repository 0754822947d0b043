"""ListTransactions (key 66), versions 0-2: transactional ids with their producer id and
state, filtered by state, producer id, (v1) minimum open duration and (v2, KIP-1152) a
regular expression the whole transactional id must match. Unknown state names are echoed
back in ``unknown_state_filters``; a pattern that does not compile answers
INVALID_REGULAR_EXPRESSION with no transactions, as Kafka. With ACLs only the
transactional ids the client may DESCRIBE are listed.
Not implemented: RE2/J syntax (Kafka's); patterns are Python's ``re``, which agrees on
the common constructs (classes, quantifiers, anchors, ``(?i)``).
"""

from __future__ import annotations

import re
from typing import Any

from kafka.protocol.admin import ListTransactionsRequest, ListTransactionsResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.broker.txn.log import TxnState
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode

_State = ListTransactionsResponse.TransactionState
_KNOWN = {s.label for s in TxnState}


@handles(ListTransactionsRequest, ListTransactionsResponse, max_version=2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    states = set(request.state_filters)
    duration = request.duration_filter if ctx.api_version >= 1 else -1
    pattern = request.transactional_id_pattern if ctx.api_version >= 2 else None
    if pattern:
        try:
            re.compile(pattern)
        except re.error:
            return ListTransactionsResponse(
                throttle_time_ms=0, error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                unknown_state_filters=[], transaction_states=[])
    found = ctx.state.txns.list(states & _KNOWN if states else set(),
                                set(request.producer_id_filters), duration, pattern)
    if states and not states & _KNOWN:
        found = []
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=0, unknown_state_filters=sorted(states - _KNOWN),
        transaction_states=[_State(transactional_id=t.transactional_id,
                                   producer_id=t.producer_id, transaction_state=t.state.label)
                            for t in found if ctx.allowed(AclOperation.DESCRIBE,
                                                          ResourceType.TRANSACTIONAL_ID,
                                                          t.transactional_id)])
