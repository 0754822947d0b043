"""The transaction coordinator.

``transactional.id`` -> (producer id, epoch), with every state change written to
``__transaction_state`` before it is acknowledged:

* InitProducerId fences zombies: the epoch is bumped, and a transaction the previous
  incarnation left open is aborted (markers carry the new epoch, so the old producer's
  writes to those partitions are refused from then on).
* AddPartitionsToTxn / AddOffsetsToTxn put partitions (and the group's
  ``__consumer_offsets`` partition) in the transaction: Empty/Complete -> Ongoing.
* EndTxn: Ongoing -> PrepareCommit/PrepareAbort (logged) -> a COMMIT or ABORT marker in
  every partition of the transaction, pending transactional offset commits applied or
  dropped -> CompleteCommit/CompleteAbort (logged). A retried EndTxn with the same
  outcome succeeds.
* Ongoing transactions older than their timeout are aborted with a bumped epoch
  (``sweep``). On start, transactions found in a Prepare state are completed; Ongoing
  ones run on (their producer may still end them) until they time out.

Everything runs on the broker's event loop; markers are local appends, so a transaction
completes within the EndTxn request.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from headrace.broker.groups.offsets import OFFSETS_TOPIC, OffsetStore
from headrace.broker.txn.log import TopicPartition, TransactionLog, TxnMetadata, TxnState
from headrace.errors import HeadraceError
from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.storage.log import PartitionLog
from headrace.storage.manager import LogManager

log = logging.getLogger(__name__)

MAX_EPOCH = 32767


VERIFICATION_CONFIG = "transaction.partition.verification.enable"


@dataclass(frozen=True)
class TxnConfig:
    """Kafka's transaction.* broker settings. ``partition_verification`` is Kafka's
    ``transaction.partition.verification.enable`` (KIP-890 part 1, on by default):
    off, a transactional batch is appended without asking the coordinator, as before
    Kafka 3.6 (how a hanging transaction could arise)."""

    max_timeout_ms: int = 900_000
    partition_verification: bool = True


class TransactionCoordinator:
    """All transactional ids of this broker. ``notify(topic, partition)`` is called after
    each marker is appended (to wake fetchers); ``allocate_producer_id`` hands out ids."""

    def __init__(self, config: TxnConfig, logs: LogManager, txn_log: TransactionLog,
                 offsets: OffsetStore, allocate_producer_id: Callable[[], int],
                 notify: Callable[[str, int], None]) -> None:
        self.config = config
        self.logs = logs
        self.txn_log = txn_log
        self.offsets = offsets
        self._allocate = allocate_producer_id
        self._notify = notify
        self.txns: dict[str, TxnMetadata] = txn_log.replay()

    def recover(self) -> None:
        """Complete transactions a crash left between Prepare and Complete."""
        for t in self.txns.values():
            if t.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("completing transaction %s left in %s", t.transactional_id,
                         t.state.label)
                self._complete(t, t.state is TxnState.PREPARE_COMMIT)

    # --- InitProducerId -----------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                         producer_epoch: int = -1) -> tuple[int, int]:
        """``(producer_id, epoch)`` for a (re)starting transactional producer. Raises
        INVALID_TRANSACTION_TIMEOUT, PRODUCER_FENCED (KIP-360 hint of an old epoch)."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            raise KafkaProtocolError(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        t = self.txns.get(transactional_id)
        if t is None:
            t = TxnMetadata(transactional_id, self._allocate(), 0, timeout_ms)
            self.txns[transactional_id] = t
            self.txn_log.write(t)
            return t.producer_id, t.producer_epoch
        if producer_id >= 0 and (producer_id, producer_epoch) != (t.producer_id, t.producer_epoch):
            raise KafkaProtocolError(ErrorCode.PRODUCER_FENCED)
        if t.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            self._complete(t, t.state is TxnState.PREPARE_COMMIT)
        if t.state is TxnState.ONGOING:
            log.info("fencing %s: aborting its open transaction", transactional_id)
            self._fence_and_abort(t)
        else:
            self._bump_epoch(t)
        t.timeout_ms = timeout_ms
        t.state = TxnState.EMPTY
        t.partitions, t.start_ms = set(), -1
        self.txn_log.write(t)
        return t.producer_id, t.producer_epoch

    def _fence_and_abort(self, t: TxnMetadata) -> None:
        """Abort the open transaction under a bumped epoch of the same producer id, so
        its markers fence the old epoch; an exhausted epoch aborts first and moves to a
        new producer id after (markers must carry the id the transaction was written
        under)."""
        if t.producer_epoch + 1 < MAX_EPOCH:
            t.producer_epoch += 1
            self._complete(t, committed=False)
        else:
            self._complete(t, committed=False)
            t.producer_id, t.producer_epoch = self._allocate(), 0

    def _bump_epoch(self, t: TxnMetadata) -> None:
        if t.producer_epoch + 1 >= MAX_EPOCH:
            t.producer_id, t.producer_epoch = self._allocate(), 0
        else:
            t.producer_epoch += 1

    # --- the transaction ------------------------------------------------------------------

    def _validate(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        t = self.txns.get(transactional_id)
        if t is None or t.producer_id != producer_id:
            raise KafkaProtocolError(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != t.producer_epoch:
            raise KafkaProtocolError(ErrorCode.PRODUCER_FENCED)
        if t.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise KafkaProtocolError(ErrorCode.CONCURRENT_TRANSACTIONS)
        return t

    def _begin(self, t: TxnMetadata) -> None:
        if t.state is not TxnState.ONGOING:
            t.state = TxnState.ONGOING
            t.partitions = set()
            t.start_ms = int(time.time() * 1000)

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Add partitions to the transaction; the error code per partition. Unknown
        partitions fail the request: UNKNOWN_TOPIC_OR_PARTITION for them,
        OPERATION_NOT_ATTEMPTED for the rest. Raises for transaction-level errors."""
        t = self._validate(transactional_id, producer_id, producer_epoch)
        unknown = set()
        for topic, p in partitions:
            try:
                self.logs.get_log(topic, p)
            except HeadraceError:
                unknown.add((topic, p))
        if unknown:
            return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                    else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in partitions}
        self._begin(t)
        if not set(partitions) <= t.partitions:
            t.partitions |= set(partitions)
            self.txn_log.write(t)
        return dict.fromkeys(partitions, ErrorCode.NONE)

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    group_id: str) -> None:
        """Put the group's ``__consumer_offsets`` partition in the transaction."""
        t = self._validate(transactional_id, producer_id, producer_epoch)
        self._begin(t)
        tp = (OFFSETS_TOPIC, self.offsets.partition_index(group_id))
        if tp not in t.partitions:
            t.partitions.add(tp)
            self.txn_log.write(t)

    def check_offset_commit(self, transactional_id: str, producer_id: int,
                            producer_epoch: int, group_id: str) -> None:
        """TxnOffsetCommit is allowed only inside an Ongoing transaction that added the
        group (AddOffsetsToTxn). Raises PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING or
        INVALID_TXN_STATE."""
        t = self._validate(transactional_id, producer_id, producer_epoch)
        # The partition (logged in __transaction_state), not the in-memory group set,
        # so the check survives a broker restart.
        offsets_partition = (OFFSETS_TOPIC, self.offsets.partition_index(group_id))
        if t.state is not TxnState.ONGOING or offsets_partition not in t.partitions:
            raise KafkaProtocolError(ErrorCode.INVALID_TXN_STATE)

    def verify_produce(self, transactional_id: str | None, producer_id: int,
                       producer_epoch: int, partition: TopicPartition) -> None:
        """Check a transactional batch before it is appended, as Kafka's produce-side
        verification does (``transaction.partition.verification.enable``, KIP-890 part 1):
        the batch's producer must be the transactional id's current incarnation, and the
        partition in its Ongoing transaction. Raises TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        (no transactional id in the request), INVALID_PRODUCER_ID_MAPPING,
        INVALID_PRODUCER_EPOCH (a fenced or future epoch) or INVALID_TXN_STATE (partition
        not added). Never blocks; no side effects. With ``partition_verification`` off,
        only the transactional id is required."""
        if transactional_id is None:
            raise KafkaProtocolError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                     "transactional records need a transactional id")
        if not self.config.partition_verification:
            return
        t = self.txns.get(transactional_id)
        if t is None or t.producer_id != producer_id:
            raise KafkaProtocolError(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != t.producer_epoch:
            raise KafkaProtocolError(ErrorCode.INVALID_PRODUCER_EPOCH)
        if t.state is not TxnState.ONGOING or partition not in t.partitions:
            raise KafkaProtocolError(ErrorCode.INVALID_TXN_STATE,
                                     "the partition was not added to the transaction")

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                committed: bool) -> set[PartitionLog]:
        """Commit or abort; returns the logs written (to fsync before answering)."""
        t = self._validate(transactional_id, producer_id, producer_epoch)
        if t.state is TxnState.ONGOING:
            return self._complete(t, committed)
        done = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
        if t.state is done:
            return set()  # a retry of the same outcome
        raise KafkaProtocolError(ErrorCode.INVALID_TXN_STATE)

    def _complete(self, t: TxnMetadata, committed: bool) -> set[PartitionLog]:
        t.state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
        self.txn_log.write(t)
        written: set[PartitionLog] = {self.txn_log.log}
        for topic, p in sorted(t.partitions):
            try:
                plog = self.logs.get_log(topic, p)
            except HeadraceError:
                continue  # deleted meanwhile: nothing left to mark
            plog.append_control(t.producer_id, t.producer_epoch, committed)
            written.add(plog)
            if topic == OFFSETS_TOPIC:
                self.offsets.complete_txn(t.producer_id, committed)
            self._notify(topic, p)
        t.state = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
        t.partitions = set()
        self.txn_log.write(t)
        return written

    # --- timeouts and tools -------------------------------------------------------------

    def sweep(self, now_ms: int | None = None) -> None:
        """Abort transactions open longer than their timeout, fencing their producer."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for t in self.txns.values():
            if t.state is TxnState.ONGOING and now - t.start_ms > t.timeout_ms:
                log.info("transaction %s timed out after %d ms: aborting",
                         t.transactional_id, now - t.start_ms)
                self._fence_and_abort(t)

    def list(self, states: set[str], producer_ids: set[int], min_duration_ms: int = -1,
             pattern: str | None = None) -> list[TxnMetadata]:
        now = int(time.time() * 1000)
        regex = re.compile(pattern) if pattern else None
        return [t for t in self.txns.values()
                if (not states or t.state.label in states)
                and (not producer_ids or t.producer_id in producer_ids)
                and (min_duration_ms < 0 or (t.start_ms >= 0 and now - t.start_ms >= min_duration_ms
                                             and t.state is TxnState.ONGOING))
                and (regex is None or regex.fullmatch(t.transactional_id))]
