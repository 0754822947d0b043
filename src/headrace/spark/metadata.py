"""Driver-side questions to the cluster, through a real Kafka client (librdkafka's admin API).

Which partitions a subscription covers, and where their logs start and end. Every call
blocks for at most ``timeout`` seconds and raises ``SparkConnectorError`` when the cluster
does not answer, so a planning step never hangs a query silently.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from headrace.spark.errors import SparkConnectorError
from headrace.spark.options import Subscription

TP = tuple[str, int]
"""A topic partition, as the connector keys its offsets."""

TIMEOUT = 30.0
# confluent-kafka's OffsetSpec factories carry no annotations.
_SPEC: Any = OffsetSpec


def admin_client(bootstrap_servers: str, client_configs: dict[str, str]) -> AdminClient:
    return AdminClient({**client_configs, "bootstrap.servers": bootstrap_servers})


def partitions_of(admin: AdminClient, subscription: Subscription) -> dict[str, int]:
    """Topic -> partition count for the topics the subscription covers that exist now.

    A ``subscribePattern`` never matches internal topics (names starting with ``__``).
    ``assign`` reports the partitions named, whether they exist or not; the caller
    decides what a missing one means.
    """
    try:
        meta = admin.list_topics(timeout=TIMEOUT)
    except KafkaException as e:
        raise SparkConnectorError(f"cannot list topics: {e}") from e
    out: dict[str, int] = {}
    for name, topic in meta.topics.items():
        if topic.error is not None or not subscription.matches(name):
            continue
        if subscription.pattern is not None and name.startswith("__"):
            continue
        out[name] = len(topic.partitions)
    return out


def topic_partitions(admin: AdminClient, subscription: Subscription) -> list[TP]:
    """The partitions a subscription reads, sorted. For ``assign``, only those that exist."""
    counts = partitions_of(admin, subscription)
    if subscription.assign is not None:
        return sorted((t, p) for t, ps in subscription.assign.items() for p in ps
                      if p < counts.get(t, 0))
    return sorted((t, p) for t, n in counts.items() for p in range(n))


def list_offsets(admin: AdminClient, tps: Iterable[TP], spec: OffsetSpec,
                 read_committed: bool = True) -> dict[TP, int]:
    """ListOffsets for many partitions at once. With ``read_committed`` the latest offset
    is the last stable offset, the end a read_committed consumer can reach. For a
    timestamp spec, -1 means no record at or after it."""
    request = {TopicPartition(t, p): spec for t, p in tps}
    if not request:
        return {}
    isolation = (IsolationLevel.READ_COMMITTED if read_committed
                 else IsolationLevel.READ_UNCOMMITTED)
    try:
        futures = admin.list_offsets(request, isolation_level=isolation,
                                     request_timeout=TIMEOUT)
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
    except KafkaException as e:
        raise SparkConnectorError(f"cannot list offsets: {e}") from e


def earliest(admin: AdminClient, tps: Iterable[TP]) -> dict[TP, int]:
    return list_offsets(admin, tps, _SPEC.earliest())


def latest(admin: AdminClient, tps: Iterable[TP], read_committed: bool) -> dict[TP, int]:
    return list_offsets(admin, tps, _SPEC.latest(), read_committed)


def for_timestamps(admin: AdminClient, timestamps: dict[TP, int]) -> dict[TP, int]:
    """The first offset whose timestamp is at or after each partition's timestamp (-1: none)."""
    out: dict[TP, int] = {}
    by_ts: dict[int, list[TP]] = {}
    for tp, ts in timestamps.items():
        by_ts.setdefault(ts, []).append(tp)
    for ts, tps in by_ts.items():
        out.update(list_offsets(admin, tps, _SPEC.for_timestamp(ts)))
    return out


def to_json(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    """Offsets as Spark checkpoints them: ``{"topic": {"0": 23}}``."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


def from_json(offsets: dict[str, dict[str, int]]) -> dict[TP, int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}
