"""ListOffsets (key 2), versions 1-8 (v0, removed in Kafka 4 by KIP-896, closes the
connection as in Kafka 4).

Timestamps: -1 latest (log end offset), -2 earliest (log start offset), -3 the record with
the largest timestamp (KIP-734), -4 earliest local (= earliest: no tiered storage), and a
real timestamp: the first record whose timestamp reaches it (the time index finds the
batch, which is then decoded), else offset -1. With read_committed (v2+), "latest" is
the last stable offset.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.storage.log import PartitionLog

_TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
_PartResp = _TopicResp.ListOffsetsPartitionResponse

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4


def lookup(plog: PartitionLog, timestamp: int, read_committed: bool) -> tuple[int, int]:
    """``(offset, timestamp)`` answered for a ListOffsets timestamp query."""
    if timestamp == LATEST:
        return (plog.last_stable_offset if read_committed else plog.log_end_offset), -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return plog.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        return plog.max_timestamp() or (-1, -1)
    return plog.offset_for_timestamp(timestamp) or (-1, -1)


@handles(ListOffsetsRequest, ListOffsetsResponse, max_version=8, min_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    read_committed = ctx.api_version >= 2 and request.isolation_level == 1
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                ctx.require(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
                plog = ctx.state.logs.get_log(t.name, p.partition_index)
                offset, ts = lookup(plog, p.timestamp, read_committed)
                parts.append(_PartResp(partition_index=p.partition_index, error_code=0,
                                       timestamp=ts, offset=offset, leader_epoch=0))
            except (HeadraceError, OSError) as e:
                parts.append(_PartResp(partition_index=p.partition_index,
                                       error_code=error_code_for(e),
                                       timestamp=-1, offset=-1, leader_epoch=-1))
        topics.append(_TopicResp(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
