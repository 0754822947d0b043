"""DescribeLogDirs (key 35), versions 1-4 (v0, removed in Kafka 4 by KIP-896,
closes the connection as in Kafka 4; v5 adds cordoning).

One log directory, the broker's data directory: for each requested partition (or all,
when ``topics`` is null) the bytes of its segment files, offset lag 0 (no replicas) and
no future log; from v4 the volume's total and usable bytes (``statvfs``), which
``headrace capacity --live`` uses. Unknown topics or partitions are left out, as Kafka does.
With ACLs it needs DESCRIBE on the cluster: else no directories, and (v3+)
CLUSTER_AUTHORIZATION_FAILED.

Tiered storage: when the broker has it on, a second directory named
``remote:<store URL>`` lists the tiered partitions with the bytes they hold in the object
store (total and usable bytes -1: unknown). Kafka reports remote sizes only as metrics;
this is how ``headrace topics describe`` and the capacity planner see both tiers, and
Kafka's tools show it as one more directory.
"""

from __future__ import annotations

import os
from typing import Any

from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode

_Result = DescribeLogDirsResponse.DescribeLogDirsResult
_Topic = _Result.DescribeLogDirsTopic
_Partition = _Topic.DescribeLogDirsPartition


@handles(DescribeLogDirsRequest, DescribeLogDirsResponse, max_version=4, min_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    logs = ctx.state.logs
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return DescribeLogDirsResponse(throttle_time_ms=0, results=[],
                                       error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    wanted: dict[str, list[int] | None]
    if request.topics is None:
        wanted = dict.fromkeys(logs.topics)
    else:
        wanted = {t.topic: list(t.partitions) for t in request.topics}
    topics = []
    for name, partitions in sorted(wanted.items()):
        topic = logs.topics.get(name)
        if topic is None:
            continue
        indexes = range(len(topic.partitions)) if partitions is None else partitions
        parts = [_Partition(partition_index=i, partition_size=topic.partitions[i].size_bytes,
                            offset_lag=0, is_future_key=False)
                 for i in indexes if 0 <= i < len(topic.partitions)]
        topics.append(_Topic(name=name, partitions=parts))
    vfs = os.statvfs(ctx.state.config.data_dir)
    result = _Result(error_code=0, log_dir=str(ctx.state.config.data_dir.resolve()),
                     topics=topics, total_bytes=vfs.f_blocks * vfs.f_frsize,
                     usable_bytes=vfs.f_bavail * vfs.f_frsize, is_cordoned=False)
    results = [result]
    if ctx.state.remote is not None:
        remote_topics = []
        for t in topics:
            logs_of = logs.topics[t.name].partitions
            parts = [_Partition(partition_index=p.partition_index,
                                partition_size=remote.size_bytes, offset_lag=0,
                                is_future_key=False)
                     for p in t.partitions if (remote := logs_of[p.partition_index].remote)]
            if parts:
                remote_topics.append(_Topic(name=t.name, partitions=parts))
        results.append(_Result(error_code=0, log_dir=REMOTE_DIR_PREFIX + remote_url(ctx),
                               topics=remote_topics, total_bytes=-1, usable_bytes=-1,
                               is_cordoned=False))
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)


REMOTE_DIR_PREFIX = "remote:"


def remote_url(ctx: RequestContext) -> str:
    config = ctx.state.config.remote
    if config.kind == "s3":
        return f"s3://{config.s3.bucket}"
    return f"file://{config.path}"
