"""Transaction administration: Kafka's ListTransactions and DescribeTransactions (KIP-664).

confluent-kafka's ``AdminClient`` (librdkafka 2.x) has no call for either API, so these two
requests go through kafka-python's ``KafkaAdminClient``, another real Kafka-protocol client
(what ``kafka-transactions.sh`` does, for any Kafka broker):

- ListTransactions is sent to every broker of the cluster metadata, since each transaction
  coordinator answers only for the transactional ids it owns; the answers are merged;
- DescribeTransactions goes to the coordinator of the id, found with FindCoordinator (key
  type 1, transaction).

Contracts are those of ``headrace.ops.admin``: each call first fetches metadata through the
session's confluent-kafka client, so an unreachable cluster fails fast with
``BrokerUnreachableError`` (kafka-python would retry until its bootstrap timeout). kafka-python
is imported on first use, so the other commands do not pay its import time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from headrace.ops.admin import AdminSession, KnownErrors, TopicPart, translate
from headrace.ops.clients import CLIENT_ID, kafka_python_settings
from headrace.ops.errors import UnknownTransactionError

T = TypeVar("T")


class TxnState(StrEnum):
    """A transaction's state, by the names Kafka's coordinators report."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


@dataclass(frozen=True)
class TransactionSummary:
    """One line of ``transactions list``; ``coordinator`` is the node id that answered."""

    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    """What ``transactions describe`` shows.

    ``start_time_ms`` (ms since the epoch) is None when the coordinator reports none (-1: no
    transaction began yet); ``partitions`` are those added to the current or last
    transaction (Kafka empties them once it completes), sorted.
    """

    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None
    partitions: tuple[TopicPart, ...]


class TransactionAdmin(AdminSession):
    """Transaction listing and description for the cluster at ``bootstrap_servers``."""

    def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        min_duration_ms: int | None = None,
    ) -> list[TransactionSummary]:
        """The transactional ids the coordinators know, sorted, keeping those in one of
        ``states`` (Kafka's names, e.g. "Ongoing"), of one of ``producer_ids``, and running
        longer than ``min_duration_ms`` (ListTransactions v1, Kafka 3.8+; a broker without it
        is a ``KafkaRequestError``). Empty filters keep everything."""
        by_broker = self._request(
            "listing transactions",
            lambda client: client.list_transactions(
                state_filters=list(states),
                producer_id_filters=list(producer_ids),
                duration_filter_ms=min_duration_ms,
            ),
        )
        return sorted(
            (
                TransactionSummary(t.transactional_id, node, t.producer_id, _state(t.state))
                for node, listings in by_broker.items()
                for t in listings
            ),
            key=lambda t: (t.transactional_id, t.coordinator),
        )

    def describe(self, transactional_id: str) -> TransactionDescription:
        """The coordinator's view of ``transactional_id``; ``UnknownTransactionError`` if the
        coordinator does not know it (never used, or expired)."""
        from kafka.errors import TransactionalIdNotFoundError

        unknown = UnknownTransactionError(f"transactional id {transactional_id!r} does not exist")
        found = self._request(
            f"describing transactional id {transactional_id!r}",
            lambda client: client.describe_transactions([transactional_id]),
            {TransactionalIdNotFoundError.errno: unknown},
        )
        if transactional_id not in found:
            raise unknown
        t = found[transactional_id]
        return TransactionDescription(
            transactional_id=transactional_id,
            coordinator=t.coordinator_id,
            state=_state(t.state),
            producer_id=t.producer_id,
            producer_epoch=t.producer_epoch,
            timeout_ms=t.transaction_timeout_ms,
            start_time_ms=t.transaction_start_time_ms if t.transaction_start_time_ms >= 0 else None,
            partitions=tuple(sorted((tp.topic, tp.partition) for tp in t.topic_partitions)),
        )

    def _request(self, what: str, call: Callable[[Any], T], known: KnownErrors | None = None) -> T:
        """``call`` with a kafka-python ``KafkaAdminClient`` bootstrapped from this session's
        servers, after a fail-fast metadata request; kafka-python's errors are translated
        by Kafka error code (``known``), as ``AdminSession._call`` does."""
        self.metadata()
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        timeout_ms = int(self._timeout * 1000)
        try:
            with KafkaAdminClient(
                bootstrap_servers=self.bootstrap_servers,
                client_id=CLIENT_ID,
                request_timeout_ms=timeout_ms,
                bootstrap_timeout_ms=timeout_ms,
                **kafka_python_settings(),
            ) as client:
                return call(client)
        except KafkaError as e:
            raise translate(getattr(e, "errno", None), known, f"{what}: {e}") from e


def _state(state: Any) -> str:
    """kafka-python's ``TransactionState`` member (a str enum) as Kafka's plain name."""
    return str(getattr(state, "value", state))
