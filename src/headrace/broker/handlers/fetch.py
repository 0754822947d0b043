"""Fetch (key 1), versions 4-18 (v0-3, message formats 0 and 1, removed in Kafka 4 by
KIP-896, close the connection as in Kafka 4; v13+ name topics by id: an unknown id answers
UNKNOWN_TOPIC_ID for each of its partitions; v15+ replica state, v17+ replica directory
ids and v18+ high watermarks are follower fields, ignored here).

Serves stored batches verbatim: the response is framed by hand around byte ranges of the
segment files, which large reads send with ``sendfile(2)``; nothing is re-encoded. Whole
batches only (never a torn one), at least one batch per response even when larger than
the limits (KIP-74), ``partition_max_bytes`` per partition and ``max_bytes`` per
response. Long poll: when fewer than ``min_bytes`` are available the request waits up to
``max_wait_ms``, woken by appends (and transaction markers) to any requested partition.
read_committed (v4+) reads stop at the last stable offset, and the aborted transactions
overlapping the read are listed so clients drop their records. With ACLs each topic needs
READ (else its partitions answer TOPIC_AUTHORIZATION_FAILED). Fetch sessions (KIP-227) are declined
with session id 0, so clients send full fetches. Not implemented: follower fetching,
rack-aware replica selection.

Tiered topics: an offset below the local log start is read from the object store on the
broker's remote-reader threads (``broker.tiering``): one partition's, from one remote
segment, per response (the others come empty and are read by the next fetches, as in
Kafka), while the event loop serves other requests; the response then does not
long-poll. A store that fails answers KAFKA_STORAGE_ERROR for that partition (retriable:
clients fetch again).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse

from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.broker.sendfile import FramedResponse
from headrace.broker.state import TopicPartition
from headrace.broker.tiering import RemoteRead, fill_remote_reads
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode
from headrace.protocol.fetch_response import FetchPartition, FetchTopic, encode_fetch_response
from headrace.storage.log import FileRegion


def _read_all(
    ctx: RequestContext, request: Any, max_bytes: int, read_committed: bool,
    remote_reads: list[RemoteRead],
) -> tuple[list[FetchTopic], int, bool, list[FileRegion]]:
    """One pass over every requested partition: (topics, bytes, any_error, regions).
    Partitions whose offset is in the object store get an empty placeholder and an entry
    in ``remote_reads``."""
    logs = ctx.state.logs
    total = 0
    had_error = False
    regions: list[FileRegion] = []
    out = []
    by_id = ctx.state.topics_by_id() if ctx.api_version >= 13 else {}
    for topic in request.topics:
        parts: list[FetchPartition] = []
        topic_id = topic.topic_id if ctx.api_version >= 13 else None
        name = by_id.get(topic_id) if topic_id is not None else topic.topic
        if name is None:
            out.append(FetchTopic("", [FetchPartition(
                p.partition, ErrorCode.UNKNOWN_TOPIC_ID, -1, -1, -1, None, -1, records=b"",
                records_length=0) for p in topic.partitions], topic_id))
            had_error = True
            continue
        denied = not ctx.allowed(AclOperation.READ, ResourceType.TOPIC, name)
        for p in topic.partitions:
            try:
                if denied:
                    ctx.require(AclOperation.READ, ResourceType.TOPIC, name)
                plog = logs.get_log(name, p.partition)
                limit = min(p.partition_max_bytes, max(max_bytes - total, 0))
                lso = plog.last_stable_offset
                if (plog.remote is not None and ctx.state.remote is not None
                        and plog.log_start_offset <= p.fetch_offset < plog.local_log_start_offset):
                    if not remote_reads:  # as Kafka: one remote read per response
                        remote_reads.append((len(out), len(parts), plog, p.fetch_offset,
                                             limit, total == 0))
                        total += 1  # a remote read answers at once: no long poll
                    aborted = plog.aborted_between(p.fetch_offset, lso) if read_committed else None
                    parts.append(FetchPartition(
                        p.partition, 0, plog.log_end_offset, lso, plog.log_start_offset,
                        aborted, -1, records=b"", records_length=0))
                    continue
                result = plog.read_region(p.fetch_offset, limit, min_one=total == 0,
                                          max_offset=lso if read_committed else None)
                region = result.region
                length = 0 if region is None else region.length
                if region is not None:
                    regions.append(region)
                    ctx.state.metrics.fetched((name, p.partition), length)
                total += length
                aborted = plog.aborted_between(p.fetch_offset, lso) if read_committed else None
                parts.append(FetchPartition(
                    p.partition, 0, result.high_watermark, lso, result.log_start_offset,
                    aborted, -1, records=region if region is not None else b"",
                    records_length=length))
            except (HeadraceError, OSError) as e:
                had_error = True
                # As Kafka: a partition that failed reports no offsets (-1), even
                # OFFSET_OUT_OF_RANGE; clients ask ListOffsets where to go on.
                parts.append(FetchPartition(p.partition, error_code_for(e), -1, -1, -1,
                                            None, -1, records=b"", records_length=0))
        out.append(FetchTopic(name, parts, topic_id))
    return out, total, had_error, regions


@handles(FetchRequest, FetchResponse, max_version=18, min_version=4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    max_bytes = request.max_bytes
    if max_bytes <= 0:
        max_bytes = 0x7FFFFFFF
    read_committed = request.isolation_level == 1
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000.0
    if ctx.api_version >= 13:
        by_id = ctx.state.topics_by_id()
        tps: list[TopicPartition] = [(by_id[t.topic_id], p.partition) for t in request.topics
                                     if t.topic_id in by_id for p in t.partitions]
    else:
        tps = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
    notifier = ctx.state.notifier
    remote_reads: list[RemoteRead] = []
    while True:
        remote_reads.clear()
        topics, total, had_error, regions = _read_all(ctx, request, max_bytes, read_committed,
                                                      remote_reads)
        remaining = deadline - time.monotonic()
        if total >= max(request.min_bytes, 1) or had_error or remaining <= 0 or not tps:
            break
        for region in regions:
            region.close()
        fut = notifier.register(tps)
        try:
            await asyncio.wait_for(fut, remaining)
        except TimeoutError:
            pass
        finally:
            notifier.unregister(tps, fut)
    if remote_reads:
        assert ctx.state.remote is not None
        await fill_remote_reads(ctx.state.remote, ctx.state.metrics, topics, remote_reads)
    return FramedResponse(encode_fetch_response(ctx.api_version, topics, error_code=ErrorCode.NONE))
