"""Shared by OffsetCommit and TxnOffsetCommit: sorting a request's partitions into the
offsets to store and the error code each partition answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from headrace.broker.groups.offsets import CommittedOffset, TopicPartition
from headrace.protocol.errors import ErrorCode
from headrace.storage.manager import LogManager


def requested(topics: Any) -> list[tuple[str, int]]:
    """Every ``(topic name, partition)`` a commit request names."""
    return [(t.name, p.partition_index) for t in topics for p in t.partitions]


def collect_commits(
    topics: Any, group_code: int, metadata_max_bytes: int, with_leader_epoch: bool,
    logs: LogManager, may_read: Callable[[str], bool],
) -> tuple[dict[TopicPartition, CommittedOffset], dict[TopicPartition, int]]:
    """``(offsets to store, code per partition)``: every partition answers ``group_code``
    when it is an error; a topic the client may not READ (ACLs) gets
    TOPIC_AUTHORIZATION_FAILED, a partition that does not exist
    UNKNOWN_TOPIC_OR_PARTITION and metadata over the limit OFFSET_METADATA_TOO_LARGE, as
    in Kafka."""
    now = int(time.time() * 1000)
    accepted: dict[TopicPartition, CommittedOffset] = {}
    codes: dict[TopicPartition, int] = {}
    for t in topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if group_code:
                codes[tp] = group_code
            elif not may_read(t.name):
                codes[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not _exists(logs, tp):
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > metadata_max_bytes:
                codes[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                epoch = p.committed_leader_epoch if with_leader_epoch else -1
                accepted[tp] = CommittedOffset(p.committed_offset, epoch, metadata, now)
                codes[tp] = 0
    return accepted, codes


def _exists(logs: LogManager, tp: TopicPartition) -> bool:
    topic = logs.topics.get(tp[0])
    return topic is not None and 0 <= tp[1] < len(topic.partitions)
