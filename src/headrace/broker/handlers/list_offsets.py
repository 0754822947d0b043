"""ListOffsets (key 2), versions 1-11 (v0, removed in Kafka 4 by KIP-896, closes the
connection as in Kafka 4).

Timestamps: -1 latest (log end offset), -2 earliest (log start offset, in the object store
on a tiered topic), -3 the record with the largest timestamp (KIP-734), -4 earliest local
(the first offset on local disk, KIP-1005), -5 latest tiered (the highest offset in the
object store, -1 if none, v9+, KIP-1005), -6 earliest pending upload (the first offset
not yet in the object store, v11+, KIP-1023, Kafka's rules: -1 for a topic without remote
storage, the log start while nothing was ever copied, never below the log start), and a
real timestamp: the first record whose
timestamp reaches it (the time index finds the batch, which is then decoded), else offset
-1. Lookups in remote segments run on the remote-reader threads; v10's timeout_ms needs
no waiting beyond that. With read_committed (v2+), "latest" is the last stable offset.
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

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
EARLIEST_PENDING_UPLOAD = -6


def earliest_pending_upload(plog: PartitionLog) -> int:
    """KIP-1023's offset as Kafka's ``UnifiedLog.fetchEarliestPendingUploadOffset``: the
    first offset the object store does not hold yet."""
    if plog.remote is None or not plog.config.remote_storage_enable:
        return -1
    end = plog.remote.end_offset
    if end < 0:
        # Nothing copied: everything is pending, unless local segments are already gone
        # (Kafka: "the leader does not know about the uploaded segments").
        return plog.log_start_offset if (
            plog.local_log_start_offset == plog.log_start_offset) else -1
    return max(end, plog.log_start_offset)


async def lookup(ctx: RequestContext, plog: PartitionLog, timestamp: int,
                 read_committed: bool) -> tuple[int, int]:
    """``(offset, timestamp)`` answered for a ListOffsets timestamp query."""
    if timestamp == LATEST:
        return (plog.last_stable_offset if read_committed else plog.log_end_offset), -1
    if timestamp == EARLIEST:
        return plog.log_start_offset, -1
    if timestamp == EARLIEST_LOCAL:
        return plog.local_log_start_offset, -1
    if timestamp == EARLIEST_PENDING_UPLOAD:
        return earliest_pending_upload(plog), -1
    if timestamp == LATEST_TIERED:
        end = plog.remote.end_offset if plog.remote is not None else -1
        return (end - 1 if end > 0 else -1), -1
    tier = ctx.state.remote
    cold = tier is not None and plog.remote is not None and (
        plog.log_start_offset < plog.local_log_start_offset)
    if timestamp == MAX_TIMESTAMP:
        if cold:
            assert tier is not None
            return await tier.max_timestamp(plog) or (-1, -1)
        return plog.max_timestamp() or (-1, -1)
    if cold:
        assert tier is not None
        return await tier.offset_for_timestamp(plog, timestamp) or (-1, -1)
    return plog.offset_for_timestamp(timestamp) or (-1, -1)


@handles(ListOffsetsRequest, ListOffsetsResponse, max_version=11, min_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    read_committed = ctx.api_version >= 2 and request.isolation_level == 1
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                ctx.require(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
                plog = ctx.state.logs.get_log(t.name, p.partition_index)
                offset, ts = await lookup(ctx, plog, p.timestamp, read_committed)
                parts.append(_PartResp(partition_index=p.partition_index, error_code=0,
                                       timestamp=ts, offset=offset, leader_epoch=0))
            except (HeadraceError, OSError) as e:
                parts.append(_PartResp(partition_index=p.partition_index,
                                       error_code=error_code_for(e),
                                       timestamp=-1, offset=-1, leader_epoch=-1))
        topics.append(_TopicResp(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
