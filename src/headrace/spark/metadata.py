"""Driver-side questions to the cluster, through a real Kafka client (librdkafka's admin API).

Which partitions a subscription covers, and where their logs start and end. On a
replicated cluster a broker may die between two questions: its partitions get new
leaders, its requests time out, a leader's answer carries an epoch the cluster has moved
past (FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER). Such errors are retried, each attempt
bounded by ``TIMEOUT`` and all of them by ``RETRY_DEADLINE``, with librdkafka refreshing
its metadata in between; a call raises ``SparkConnectorError`` only for an error that is
not transient or once the deadline passed, so a planning step never hangs a query
silently nor fails it for a failover.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from headrace.spark.errors import SparkConnectorError
from headrace.spark.options import Subscription

TP = tuple[str, int]
"""A topic partition, as the connector keys its offsets."""

TIMEOUT = 30.0
"""Bound of one attempt of a request, in seconds."""
RETRY_DEADLINE = 120.0
"""Bound of all the attempts of one call: longer than a failover (a dead broker is fenced
after ``broker.session.timeout.ms``, 9 s by default, then its partitions move)."""
T = TypeVar("T")
# Errors a failover or a just-created topic produces, and that the next attempt (on fresh
# metadata) cures. librdkafka marks some retriable itself (``KafkaError.retriable``).
_TRANSIENT = frozenset({
    KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
    KafkaError._WAIT_COORD, KafkaError._UNKNOWN_PARTITION, KafkaError._NOENT,
    KafkaError.REQUEST_TIMED_OUT, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.NOT_CONTROLLER,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.BROKER_NOT_AVAILABLE, KafkaError.NETWORK_EXCEPTION,
    KafkaError.KAFKA_STORAGE_ERROR,
})


def transient(error: KafkaError) -> bool:
    """True for an error a retry on fresh metadata may cure (a failover's)."""
    return bool(error.retriable()) or error.code() in _TRANSIENT


def with_retries(what: str, call: Callable[[], T], deadline: float = RETRY_DEADLINE) -> T:
    """``call()`` until it returns, retrying after a ``transient`` Kafka error (backoff
    0.1 s doubling to 2 s) for up to ``deadline`` seconds. Raises ``SparkConnectorError``
    (``"cannot <what>: ..."``) for any other Kafka error or the last one at the deadline.
    Blocks; ``call`` must be safe to repeat (a read, or a create that tolerates "exists")."""
    end = time.monotonic() + deadline
    pause = 0.1
    while True:
        try:
            return call()
        except KafkaException as e:
            error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if error is None or not transient(error) or time.monotonic() + pause > end:
                raise SparkConnectorError(f"cannot {what}: {e}") from e
        time.sleep(pause)
        pause = min(pause * 2, 2.0)
# confluent-kafka's OffsetSpec factories carry no annotations.
_SPEC: Any = OffsetSpec


def admin_client(bootstrap_servers: str, client_configs: dict[str, str]) -> AdminClient:
    return AdminClient({"log_level": 4, **client_configs, "bootstrap.servers": bootstrap_servers})


def partitions_of(admin: AdminClient, subscription: Subscription) -> dict[str, int]:
    """Topic -> partition count for the topics the subscription covers that exist now.

    A ``subscribePattern`` never matches internal topics (names starting with ``__``).
    ``assign`` reports the partitions named, whether they exist or not; the caller
    decides what a missing one means.
    """
    meta = with_retries("list topics", lambda: admin.list_topics(timeout=TIMEOUT))
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

    def ask() -> dict[TP, int]:
        futures = admin.list_offsets(request, isolation_level=isolation,
                                     request_timeout=TIMEOUT)
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    return with_retries("list offsets", ask)


def earliest(admin: AdminClient, tps: Iterable[TP]) -> dict[TP, int]:
    return list_offsets(admin, tps, _SPEC.earliest())


def latest(admin: AdminClient, tps: Iterable[TP], read_committed: bool) -> dict[TP, int]:
    return list_offsets(admin, tps, _SPEC.latest(), read_committed)


def topic_ids(admin: AdminClient, topics: Iterable[str]) -> dict[str, str]:
    """Topic name -> topic id, in the UUID's canonical text form."""
    names = sorted(set(topics))
    if not names:
        return {}

    def ask() -> dict[str, str]:
        futures = admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT)
        out = {}
        for name, future in futures.items():
            tid = future.result().topic_id
            high = tid.get_most_significant_bits() & 0xFFFF_FFFF_FFFF_FFFF
            low = tid.get_least_significant_bits() & 0xFFFF_FFFF_FFFF_FFFF
            out[name] = str(uuid.UUID(int=high << 64 | low))
        return out

    return with_retries("describe topics", ask)


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
