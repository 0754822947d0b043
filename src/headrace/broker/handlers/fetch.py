"""Fetch (key 1), versions 0-12 (topic names; topic ids from v13 are not served).

Serves stored batches verbatim: whole batches only (never a torn one), at least one
batch per response even when larger than the limits (KIP-74), ``partition_max_bytes``
per partition and ``max_bytes`` (v3+) per response. Long poll: when fewer than
``min_bytes`` are available the request waits up to ``max_wait_ms``, woken by appends to
any requested partition. The last stable offset equals the high watermark until
transactions exist. Fetch sessions (KIP-227) are declined with session id 0, so clients
send full fetches. Not implemented: sendfile (bytes are pread from the page cache and
copied once into the response), follower fetching, rack-aware replica selection.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse

from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.broker.state import TopicPartition
from headrace.errors import HeadraceError
from headrace.protocol.errors import ErrorCode

_TopicResp = FetchResponse.FetchableTopicResponse
_PartResp = _TopicResp.PartitionData


def _read_all(ctx: RequestContext, request: Any, max_bytes: int) -> tuple[list[Any], int, bool]:
    """One pass over every requested partition: (responses, bytes, any_error)."""
    logs = ctx.state.logs
    total = 0
    had_error = False
    out = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                plog = logs.get_log(topic.topic, p.partition)
                limit = min(p.partition_max_bytes, max(max_bytes - total, 0))
                result = plog.read(p.fetch_offset, limit, min_one=total == 0)
                total += len(result.data)
                parts.append(_PartResp(
                    partition_index=p.partition, error_code=0,
                    high_watermark=result.high_watermark,
                    last_stable_offset=result.high_watermark,
                    log_start_offset=result.log_start_offset,
                    aborted_transactions=None, preferred_read_replica=-1,
                    records=result.data))
            except (HeadraceError, OSError) as e:
                had_error = True
                hw, lso = -1, -1
                try:
                    plog = logs.get_log(topic.topic, p.partition)
                    hw, lso = plog.log_end_offset, plog.log_start_offset
                except HeadraceError:
                    pass
                parts.append(_PartResp(
                    partition_index=p.partition, error_code=error_code_for(e),
                    high_watermark=hw, last_stable_offset=hw, log_start_offset=lso,
                    aborted_transactions=None, preferred_read_replica=-1, records=b""))
        out.append(_TopicResp(topic=topic.topic, partitions=parts))
    return out, total, had_error


@handles(FetchRequest, FetchResponse, max_version=12)
async def handle(ctx: RequestContext, request: Any) -> Any:
    max_bytes = request.max_bytes if ctx.api_version >= 3 else 0x7FFFFFFF
    if max_bytes <= 0:
        max_bytes = 0x7FFFFFFF
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000.0
    tps: list[TopicPartition] = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
    notifier = ctx.state.notifier
    while True:
        responses, total, had_error = _read_all(ctx, request, max_bytes)
        remaining = deadline - time.monotonic()
        if total >= max(request.min_bytes, 1) or had_error or remaining <= 0 or not tps:
            break
        fut = notifier.register(tps)
        try:
            await asyncio.wait_for(fut, remaining)
        except TimeoutError:
            pass
        finally:
            notifier.unregister(tps, fut)
    return FetchResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0,
                         responses=responses)
