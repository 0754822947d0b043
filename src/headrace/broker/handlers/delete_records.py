"""DeleteRecords (key 21), versions 0-2.

Advances each partition's log start offset to the requested offset (-1: the high
watermark) and deletes the segments wholly below it; answers the new low watermark (the
log start offset, never lowered: asking below it changes nothing). The new start offset
is written (temp file and rename) before the answer, so it survives ``kill -9``, and is
fsynced on a worker thread before the answer too. Errors per partition:
OFFSET_OUT_OF_RANGE beyond the high watermark, POLICY_VIOLATION when the topic's
cleanup.policy lacks delete (as Kafka), UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION
for an internal topic (``internal_topics``: as Kafka, for every client). ``timeout_ms`` is not
needed: there are no replicas to wait for. On a tiered topic the remote segments wholly
below the new start are deleted from the object store by the tiering task (woken at once);
no read reaches them from the answer on.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

from headrace.broker import internal_topics
from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.storage.log import PartitionLog

_TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
_PartResult = _TopicResult.DeleteRecordsPartitionResult


def _sync(logs: list[PartitionLog]) -> None:
    for plog in logs:
        plog.sync_log_start()


@handles(DeleteRecordsRequest, DeleteRecordsResponse, max_version=2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    logs = ctx.state.logs
    changed: list[PartitionLog] = []
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                ctx.require(AclOperation.DELETE, ResourceType.TOPIC, t.name)
                plog = logs.get_log(t.name, p.partition_index)
                internal_topics.refuse_change(t.name, "delete records of")
                before = plog.log_start_offset
                low = plog.delete_records(p.offset)
                if low != before:
                    changed.append(plog)
                parts.append(_PartResult(partition_index=p.partition_index, low_watermark=low,
                                         error_code=0))
            except (HeadraceError, OSError) as e:
                parts.append(_PartResult(partition_index=p.partition_index, low_watermark=-1,
                                         error_code=error_code_for(e)))
        topics.append(_TopicResult(name=t.name, partitions=parts))
    if changed and ctx.state.remote is not None:
        ctx.state.remote.wake.set()
    if changed:
        await asyncio.to_thread(_sync, changed)
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
