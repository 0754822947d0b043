"""OffsetForLeaderEpoch (key 23), versions 2-4 (v0-1, removed in Kafka 4 by KIP-896,
close the connection as in Kafka 4).

This broker has one leader epoch (0) for every partition, so the end offset of epoch 0
is the log end offset, and asking for a later epoch gets UNDEFINED (-1/-1) as Kafka
answers for an unknown epoch. Clients use it to validate positions after a leader change.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType

_TopicResp = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_PartResp = _TopicResp.EpochEndOffset


@handles(OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, max_version=4,
          min_version=2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                ctx.require(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic)
                plog = ctx.state.logs.get_log(t.topic, p.partition)
                known = p.leader_epoch <= 0
                parts.append(_PartResp(error_code=0, partition=p.partition,
                                       leader_epoch=0 if known else -1,
                                       end_offset=plog.log_end_offset if known else -1))
            except HeadraceError as e:
                parts.append(_PartResp(error_code=error_code_for(e), partition=p.partition,
                                       leader_epoch=-1, end_offset=-1))
        topics.append(_TopicResp(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
