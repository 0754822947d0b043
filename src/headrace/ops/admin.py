"""The base of the CLI's administration classes (topics, groups, transactions).

An ``AdminSession`` wraps one confluent-kafka ``AdminClient``. Contracts its subclasses keep:

- creating one opens no connection; the first call does, and fails fast with
  ``BrokerUnreachableError`` if no broker answers (``ClientSession.metadata``);
- every method blocks until the broker answered or ``timeout`` seconds passed, and raises an
  ``OpsError`` subclass whose message is fit to show the user: a Kafka error code the caller
  gave a meaning to (``known``) becomes that error, anything else ``KafkaRequestError``;
- nothing is cached: each call reflects the cluster at the time it is made.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, OffsetSpec

from headrace.ops.clients import (
    REQUEST_TIMEOUT_S,
    ClientSession,
    error_text,
    kafka_error,
    wait_future,
)
from headrace.ops.errors import KafkaRequestError, OpsError

TopicPart = tuple[str, int]
# Where ListOffsets looks: the log start, the log end, or a timestamp (ms since the epoch).
OffsetQuery = Literal["earliest", "latest"] | int
# librdkafka's offset for a partition no leader answered for (RD_KAFKA_OFFSET_INVALID)
_NO_ANSWER = -1001
_RETRY_S = 0.2
# librdkafka's failures for a partition whose leader is gone (``_NOENT``: "Failed to query
# partition leaders: No leaders found"): not flagged retriable, yet each only means a
# failover is under way
_LEADERLESS = frozenset({KafkaError._NOENT, KafkaError.LEADER_NOT_AVAILABLE,
                         KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.FENCED_LEADER_EPOCH})
# A group's coordinator moving to another broker (or loading the group after a move); a
# request sent to the dead coordinator before the move times out or fails on transport
_COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                 KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                 KafkaError._TIMED_OUT, KafkaError._TRANSPORT})
# Kafka error code -> the error to raise instead of a generic KafkaRequestError.
KnownErrors = Mapping[int, OpsError]


def translate(code: int | None, known: KnownErrors | None, message: str) -> OpsError:
    """The error to raise for a request that failed with Kafka error ``code``: the one
    ``known`` gives for it, else ``KafkaRequestError(message)``."""
    if known is not None and code is not None and code in known:
        return known[code]
    return KafkaRequestError(message)


class AdminSession:
    """Administration of the cluster reachable at ``bootstrap_servers`` (module docstring)."""

    def __init__(self, bootstrap_servers: str, timeout: float = REQUEST_TIMEOUT_S) -> None:
        # Describing a topic must never create it.
        self._session = ClientSession(
            AdminClient, bootstrap_servers, {"allow.auto.create.topics": False}, timeout
        )
        self._admin = self._session.client
        self._timeout = timeout

    @property
    def bootstrap_servers(self) -> str:
        return self._session.bootstrap_servers

    def metadata(self, topic: str | None = None) -> ClusterMetadata:
        """Cluster metadata (of one ``topic``: ``UnknownTopicError`` if it does not exist)."""
        return self._session.metadata(topic)

    def partitions(self, topic: str, wanted: Iterable[int] | None = None) -> list[int]:
        """``ClientSession.partitions``: ids of ``topic``'s partitions, checked to exist."""
        return self._session.partitions(topic, wanted)

    def list_offsets(
        self, partitions: Iterable[TopicPart], at: OffsetQuery
    ) -> dict[TopicPart, int]:
        """Kafka's ListOffsets for each partition: the log start offset (``"earliest"``), the
        log end offset (``"latest"``), or the first offset whose record timestamp is at or
        after ``at`` ms (-1 when no record's is). The partitions must exist.

        On a cluster a partition's leader may be dead and not yet replaced (until the
        controller fences it): librdkafka then answers offset -1001 without an error, or
        fails with "No leaders found" (or another retriable error). Such partitions are
        asked again (the metadata refreshed) until a live leader answers,
        for up to ``timeout`` after the first answer;
        ``KafkaRequestError`` after that, never -1001 as if it were an offset."""
        spec = OffsetSpec.for_timestamp(at) if isinstance(at, int) else _named_spec(at)
        wanted = [TopicPartition(t, p) for t, p in partitions]
        offsets: dict[TopicPart, int] = {}
        deadline: float | None = None
        while True:
            futures = self._admin.list_offsets({tp: spec for tp in wanted},
                                               request_timeout=self._timeout)
            unanswered: list[TopicPartition] = []
            last_error = ""
            for tp, future in futures.items():
                where = f"listing offsets of {tp.topic}-{tp.partition}"
                try:
                    offset = wait_future(future, self._timeout, where).offset
                except KafkaException as e:
                    error = kafka_error(e)
                    if error.code() not in _LEADERLESS and not error.retriable():
                        raise translate(error.code(), None, f"{where}: {error_text(error)}") \
                            from e
                    offset, last_error = _NO_ANSWER, f" ({error_text(error)})"
                if offset == _NO_ANSWER:
                    unanswered.append(TopicPartition(tp.topic, tp.partition))
                else:
                    offsets[(tp.topic, tp.partition)] = offset
            if not unanswered:
                return offsets
            if deadline is None:  # the first answer may itself have waited out the dead leader
                deadline = time.monotonic() + self._timeout
            if time.monotonic() >= deadline:
                names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in unanswered)
                raise KafkaRequestError(f"listing offsets of {names}: no leader answered "
                                        f"within {self._timeout:g} s{last_error}")
            wanted = unanswered
            time.sleep(_RETRY_S)
            # librdkafka keeps asking the leader it cached: a metadata request replaces it
            for topic in {tp.topic for tp in unanswered}:
                self._admin.list_topics(topic, timeout=max(0.1, deadline - time.monotonic()))

    def _call(
        self,
        future: concurrent.futures.Future[Any],
        what: str,
        known: KnownErrors | None = None,
    ) -> Any:
        """The result of an admin request's ``future``; on failure, the error ``translate``
        picks (``what`` starts the generic message, e.g. "cannot delete topic 'x'")."""
        try:
            return wait_future(future, self._timeout, what)
        except KafkaException as e:
            error = kafka_error(e)
            raise translate(error.code(), known, f"{what}: {error_text(error)}") from e


    def _call_coordinated(
        self,
        request: Callable[[], concurrent.futures.Future[Any]],
        what: str,
        known: KnownErrors | None = None,
    ) -> Any:
        """``_call`` for a request a group coordinator answers: on a cluster the coordinator
        moves when its broker dies (and loads the group's state after a move), and
        librdkafka hands NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
        COORDINATOR_LOAD_IN_PROGRESS back instead of retrying, or times out on the dead
        coordinator it had looked up before the move. ``request()`` is sent again until
        another answer comes, for up to ``timeout`` after the first one."""
        deadline: float | None = None
        while True:
            try:
                return wait_future(request(), self._timeout, what)
            except KafkaException as e:
                error = kafka_error(e)
                if error.code() not in _COORDINATOR_MOVING:
                    raise translate(error.code(), known, f"{what}: {error_text(error)}") from e
                if deadline is None:
                    deadline = time.monotonic() + self._timeout
                if time.monotonic() >= deadline:
                    raise translate(error.code(), known,
                                    f"{what}: no coordinator answered within "
                                    f"{self._timeout:g} s ({error_text(error)})") from e
                time.sleep(_RETRY_S)


def _named_spec(name: Literal["earliest", "latest"]) -> OffsetSpec:
    # OffsetSpec.earliest()/latest() carry no annotations, which mypy strict will not call.
    factory: Callable[[], OffsetSpec] = getattr(OffsetSpec, name)
    return factory()
