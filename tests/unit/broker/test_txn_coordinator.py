"""The transaction coordinator, driven directly against real partition logs (no sockets).

State transitions and their markers, fencing on re-init, EndTxn retries, timeouts with
``sweep(now_ms=...)``, and the replay of ``__transaction_state`` after a crash, with
``recover()`` completing what a crash left in a Prepare state.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from headrace.broker.groups.offsets import OFFSETS_TOPIC, CommittedOffset, OffsetStore
from headrace.broker.txn.coordinator import MAX_EPOCH, TransactionCoordinator, TxnConfig
from headrace.broker.txn.log import TransactionLog, TxnState
from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.protocol.records import (
    TRANSACTIONAL_FLAG,
    build_batch,
    control_committed,
    scan_batches,
    validate_batches,
)
from headrace.storage.config import LogConfig
from headrace.storage.log import PartitionLog
from headrace.storage.manager import LogManager

TID = "txn-a"
TOPIC = "t"
TIMEOUT_MS = 10_000


class Node:
    """What a broker gives its transaction coordinator, on a real data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.logs = LogManager(data_dir, LogConfig())
        if TOPIC not in self.logs.topics:
            self.logs.create_topic(TOPIC, 2)
        self.offsets = OffsetStore(self.logs)
        self.offsets.load()
        self.notified: list[tuple[str, int]] = []
        self.coord = TransactionCoordinator(
            TxnConfig(), self.logs, TransactionLog(self.logs), self.offsets,
            self.logs.allocate_producer_id, lambda t, p: self.notified.append((t, p)))

    def crash_and_reopen(self) -> Node:
        """A new coordinator over the same files, as after ``kill -9`` (nothing flushed
        or snapshotted; the page cache keeps what was written). ``recover()`` not run."""
        for plog in self.logs.all_logs():
            for seg in plog.segments:
                seg.close()
        return Node(self.data_dir)

    def log(self, partition: int = 0) -> PartitionLog:
        return self.logs.get_log(TOPIC, partition)


def produce(plog: PartitionLog, pid: int, epoch: int, seq: int = 0, n: int = 2,
            transactional: bool = True) -> int:
    """Append a producer's batch as Produce would; returns its base offset."""
    data = bytearray(build_batch([(None, b"v%d" % i) for i in range(n)],
                                 attributes=TRANSACTIONAL_FLAG if transactional else 0,
                                 producer_id=pid, producer_epoch=epoch, base_sequence=seq))
    return plog.append(data, validate_batches(data)).base_offset


def markers(plog: PartitionLog) -> list[tuple[int, int, int, bool | None]]:
    """``(offset, producer id, epoch, committed)`` of every control batch of the log."""
    data = plog.read(plog.log_start_offset, 1 << 24).data
    return [(h.base_offset, h.producer_id, h.producer_epoch,
             control_committed(data[pos:pos + h.size]))
            for pos, h in scan_batches(data) if h.is_control]


def code_of(excinfo: pytest.ExceptionInfo[KafkaProtocolError]) -> ErrorCode:
    return excinfo.value.code


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def begin(node: Node, partitions: tuple[int, ...] = (0,), tid: str = TID) -> tuple[int, int]:
    """InitProducerId, then data in ``partitions`` of an open transaction."""
    pid, epoch = node.coord.init_producer_id(tid, TIMEOUT_MS)
    codes = node.coord.add_partitions(tid, pid, epoch, [(TOPIC, p) for p in partitions])
    assert set(codes.values()) == {ErrorCode.NONE}
    for p in partitions:
        produce(node.log(p), pid, epoch)
    return pid, epoch


# --- InitProducerId -------------------------------------------------------------------------


def test_first_init_allocates_an_id_at_epoch_0_and_each_reinit_bumps_the_epoch(
        node: Node) -> None:
    pid, epoch = node.coord.init_producer_id(TID, TIMEOUT_MS)
    assert epoch == 0
    assert node.coord.init_producer_id(TID, TIMEOUT_MS) == (pid, 1)
    assert node.coord.init_producer_id(TID, TIMEOUT_MS) == (pid, 2)
    other, other_epoch = node.coord.init_producer_id("txn-b", TIMEOUT_MS)
    assert other != pid and other_epoch == 0
    assert node.coord.txns[TID].state is TxnState.EMPTY


@pytest.mark.parametrize("timeout_ms", [0, -1, TxnConfig().max_timeout_ms + 1])
def test_init_refuses_a_timeout_out_of_bounds(node: Node, timeout_ms: int) -> None:
    with pytest.raises(KafkaProtocolError) as e:
        node.coord.init_producer_id(TID, timeout_ms)
    assert code_of(e) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert TID not in node.coord.txns


def test_kip_360_reinit_with_the_current_id_and_epoch_bumps_and_a_stale_one_is_fenced(
        node: Node) -> None:
    pid, epoch = node.coord.init_producer_id(TID, TIMEOUT_MS)
    assert node.coord.init_producer_id(TID, TIMEOUT_MS, pid, epoch) == (pid, epoch + 1)
    with pytest.raises(KafkaProtocolError) as e:
        node.coord.init_producer_id(TID, TIMEOUT_MS, pid, epoch)  # the old epoch
    assert code_of(e) == ErrorCode.PRODUCER_FENCED


def test_reinit_fences_the_old_epoch_and_aborts_its_open_transaction(node: Node) -> None:
    pid, epoch = begin(node, (0, 1))
    assert node.log(0).last_stable_offset == 0  # held back by the open transaction
    new_pid, new_epoch = node.coord.init_producer_id(TID, TIMEOUT_MS)
    assert (new_pid, new_epoch) == (pid, epoch + 1)
    for p in (0, 1):
        plog = node.log(p)
        # The ABORT marker carries the new epoch, so the old one is refused from now on.
        assert markers(plog) == [(2, pid, new_epoch, False)]
        assert plog.last_stable_offset == plog.log_end_offset == 3
        assert plog.aborted_between(0, 3) == [(pid, 0)]
    t = node.coord.txns[TID]
    assert (t.state, t.partitions) == (TxnState.EMPTY, set())
    with pytest.raises(KafkaProtocolError) as e:
        node.coord.add_partitions(TID, pid, epoch, [(TOPIC, 0)])
    assert code_of(e) == ErrorCode.PRODUCER_FENCED
    with pytest.raises(KafkaProtocolError) as e:
        node.coord.end_txn(TID, pid, epoch, committed=True)
    assert code_of(e) == ErrorCode.PRODUCER_FENCED
    with pytest.raises(KafkaProtocolError) as e:  # the zombie's next write
        produce(node.log(0), pid, epoch, seq=2)
    assert code_of(e) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_reinit_at_the_last_epoch_still_closes_the_open_transaction(node: Node) -> None:
    pid, _ = node.coord.init_producer_id(TID, TIMEOUT_MS)
    last = MAX_EPOCH - 1
    node.coord.txns[TID].producer_epoch = last  # as after 32766 restarts
    node.coord.add_partitions(TID, pid, last, [(TOPIC, 0)])
    produce(node.log(0), pid, last)
    new_pid, new_epoch = node.coord.init_producer_id(TID, TIMEOUT_MS)
    assert (new_pid, new_epoch) != (pid, last)
    assert node.log(0).last_stable_offset == node.log(0).log_end_offset


# --- the transaction --------------------------------------------------------------------------


def test_add_partitions_opens_the_transaction_and_logs_its_partitions(node: Node) -> None:
    pid, epoch = node.coord.init_producer_id(TID, TIMEOUT_MS)
    node.coord.add_partitions(TID, pid, epoch, [(TOPIC, 0)])
    node.coord.add_partitions(TID, pid, epoch, [(TOPIC, 1), (TOPIC, 0)])
    t = node.coord.txns[TID]
    assert t.state is TxnState.ONGOING and t.start_ms > 0
    assert t.partitions == {(TOPIC, 0), (TOPIC, 1)}
    replayed = TransactionLog(node.logs).replay()[TID]
    assert (replayed.state, replayed.partitions) == (TxnState.ONGOING, t.partitions)


def test_an_unknown_partition_fails_the_whole_add_and_changes_nothing(node: Node) -> None:
    pid, epoch = node.coord.init_producer_id(TID, TIMEOUT_MS)
    codes = node.coord.add_partitions(TID, pid, epoch, [(TOPIC, 0), (TOPIC, 7), ("nope", 0)])
    assert codes == {(TOPIC, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                     (TOPIC, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert node.coord.txns[TID].state is TxnState.EMPTY


def test_requests_of_unknown_ids_or_other_producers_are_refused(node: Node) -> None:
    pid, epoch = node.coord.init_producer_id(TID, TIMEOUT_MS)
    cases = [("unknown", pid, epoch, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
             (TID, pid + 1000, epoch, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
             (TID, pid, epoch + 1, ErrorCode.PRODUCER_FENCED)]
    for tid, p, e, code in cases:
        with pytest.raises(KafkaProtocolError) as excinfo:
            node.coord.add_partitions(tid, p, e, [(TOPIC, 0)])
        assert code_of(excinfo) == code, (tid, p, e)
        with pytest.raises(KafkaProtocolError) as excinfo:
            node.coord.add_offsets(tid, p, e, "g")
        assert code_of(excinfo) == code, (tid, p, e)


def test_commit_writes_a_commit_marker_in_every_partition_and_completes(node: Node) -> None:
    pid, epoch = begin(node, (0, 1))
    written = node.coord.end_txn(TID, pid, epoch, committed=True)
    assert {node.log(0), node.log(1)} <= written  # to fsync before answering
    for p in (0, 1):
        assert markers(node.log(p)) == [(2, pid, epoch, True)]
        assert node.log(p).last_stable_offset == 3
        assert node.log(p).aborted_between(0, 3) == []
    assert sorted(node.notified) == [(TOPIC, 0), (TOPIC, 1)]  # fetchers woken
    t = node.coord.txns[TID]
    assert (t.state, t.partitions) == (TxnState.COMPLETE_COMMIT, set())
    assert TransactionLog(node.logs).replay()[TID].state is TxnState.COMPLETE_COMMIT


def test_abort_writes_abort_markers_and_remembers_the_aborted_range(node: Node) -> None:
    pid, epoch = begin(node, (0,))
    produce(node.log(0), pid, epoch, seq=2, n=3)  # offsets 2-4
    node.coord.end_txn(TID, pid, epoch, committed=False)
    assert markers(node.log(0)) == [(5, pid, epoch, False)]
    assert node.log(0).aborted_between(0, 6) == [(pid, 0)]
    assert node.coord.txns[TID].state is TxnState.COMPLETE_ABORT


def test_end_txn_retried_with_the_same_outcome_succeeds_and_the_opposite_is_refused(
        node: Node) -> None:
    pid, epoch = begin(node)
    node.coord.end_txn(TID, pid, epoch, committed=True)
    assert node.coord.end_txn(TID, pid, epoch, committed=True) == set()  # nothing rewritten
    assert len(markers(node.log(0))) == 1
    with pytest.raises(KafkaProtocolError) as e:
        node.coord.end_txn(TID, pid, epoch, committed=False)
    assert code_of(e) == ErrorCode.INVALID_TXN_STATE
    # The next transaction starts from CompleteCommit.
    node.coord.add_partitions(TID, pid, epoch, [(TOPIC, 1)])
    assert node.coord.txns[TID].partitions == {(TOPIC, 1)}
    node.coord.end_txn(TID, pid, epoch, committed=False)
    assert node.coord.end_txn(TID, pid, epoch, committed=False) == set()
    with pytest.raises(KafkaProtocolError) as e:
        node.coord.end_txn(TID, pid, epoch, committed=True)
    assert code_of(e) == ErrorCode.INVALID_TXN_STATE


def test_end_txn_without_a_transaction_is_an_invalid_state(node: Node) -> None:
    pid, epoch = node.coord.init_producer_id(TID, TIMEOUT_MS)
    for committed in (True, False):
        with pytest.raises(KafkaProtocolError) as e:
            node.coord.end_txn(TID, pid, epoch, committed)
        assert code_of(e) == ErrorCode.INVALID_TXN_STATE


def test_offsets_in_a_transaction_are_applied_on_commit_only(node: Node) -> None:
    pid, epoch = node.coord.init_producer_id(TID, TIMEOUT_MS)
    with pytest.raises(KafkaProtocolError) as e:  # before AddOffsetsToTxn
        node.coord.check_offset_commit(TID, pid, epoch, "g")
    assert code_of(e) == ErrorCode.INVALID_TXN_STATE
    for committed, offset in ((False, 5), (True, 7)):
        node.coord.add_offsets(TID, pid, epoch, "g")
        assert (OFFSETS_TOPIC, node.offsets.partition_index("g")) in node.coord.txns[TID].partitions
        node.coord.check_offset_commit(TID, pid, epoch, "g")
        node.offsets.commit_transactional("g", pid, epoch, {(TOPIC, 0): CommittedOffset(offset)})
        assert node.offsets.committed("g") == {}  # staged, not applied
        node.coord.end_txn(TID, pid, epoch, committed)
    assert node.offsets.committed("g")[(TOPIC, 0)].offset == 7
    offsets_log = node.offsets.partition_for("g")
    assert [m[3] for m in markers(offsets_log)] == [False, True]


# --- Prepare states, crash and replay -----------------------------------------------------------


def crash_in_prepare(node: Node, committed: bool) -> tuple[int, int]:
    """An open transaction with data in partition 0 and offsets of group ``g``, whose
    coordinator crashed right after logging PrepareCommit/PrepareAbort."""
    pid, epoch = begin(node, (0,))
    node.coord.add_offsets(TID, pid, epoch, "g")
    node.offsets.commit_transactional("g", pid, epoch, {(TOPIC, 0): CommittedOffset(2)})
    t = node.coord.txns[TID]
    state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
    node.coord.txn_log.write(dataclasses.replace(t, state=state, partitions=set(t.partitions)))
    return pid, epoch


@pytest.mark.parametrize("committed", [True, False])
def test_recover_completes_a_transaction_left_in_prepare(tmp_path: Path, committed: bool) -> None:
    node = Node(tmp_path)
    pid, epoch = crash_in_prepare(node, committed)
    node = node.crash_and_reopen()
    state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
    assert node.coord.txns[TID].state is state
    # Until recovered, the transaction is busy: its producer must retry.
    with pytest.raises(KafkaProtocolError) as e:
        node.coord.add_partitions(TID, pid, epoch, [(TOPIC, 1)])
    assert code_of(e) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert node.log(0).last_stable_offset == 0
    node.coord.recover()
    assert markers(node.log(0)) == [(2, pid, epoch, committed)]
    assert node.log(0).last_stable_offset == node.log(0).log_end_offset
    t = node.coord.txns[TID]
    done = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
    assert (t.state, t.partitions) == (done, set())
    expected = {(TOPIC, 0): 2} if committed else {}
    assert {tp: c.offset for tp, c in node.offsets.committed("g").items()} == expected
    # Durable: the next start replays the outcome and has nothing left to complete.
    node = node.crash_and_reopen()
    assert node.coord.txns[TID].state is done
    node.coord.recover()
    assert len(markers(node.log(0))) == 1
    assert {tp: c.offset for tp, c in node.offsets.committed("g").items()} == expected
    # A retried EndTxn of the same outcome (its answer was lost in the crash) succeeds.
    assert node.coord.end_txn(TID, pid, epoch, committed) == set()


def test_replay_restores_every_transactional_id(tmp_path: Path) -> None:
    node = Node(tmp_path)
    a_pid, a_epoch = begin(node, (0, 1), tid="open")
    b_pid, b_epoch = begin(node, (0,), tid="done")
    node.coord.end_txn("done", b_pid, b_epoch, committed=True)
    c_pid, _ = node.coord.init_producer_id("bumped", TIMEOUT_MS)
    node.coord.init_producer_id("bumped", TIMEOUT_MS)
    before = {tid: (t.producer_id, t.producer_epoch, t.state, t.partitions, t.timeout_ms,
                    t.start_ms) for tid, t in node.coord.txns.items()}
    node = node.crash_and_reopen()
    node.coord.recover()
    after = {tid: (t.producer_id, t.producer_epoch, t.state, t.partitions, t.timeout_ms,
                   t.start_ms) for tid, t in node.coord.txns.items()}
    assert after == before
    assert after["open"][2] is TxnState.ONGOING  # runs on: its producer may still end it
    assert after["bumped"][:2] == (c_pid, 1)
    # The open transaction can still be committed by its producer after the restart.
    node.coord.end_txn("open", a_pid, a_epoch, committed=True)
    assert node.log(1).last_stable_offset == node.log(1).log_end_offset
    # Producer ids are never handed out twice, even across the crash.
    new_pid, _ = node.coord.init_producer_id("new", TIMEOUT_MS)
    assert new_pid not in {a_pid, b_pid, c_pid}


def test_offset_commit_is_allowed_after_a_restart_for_a_group_added_before(
        tmp_path: Path) -> None:
    node = Node(tmp_path)
    pid, epoch = begin(node, (0,))
    node.coord.add_offsets(TID, pid, epoch, "g")
    node = node.crash_and_reopen()
    node.coord.recover()
    node.coord.check_offset_commit(TID, pid, epoch, "g")


# --- timeouts --------------------------------------------------------------------------------


def test_sweep_aborts_a_transaction_past_its_timeout_and_fences_its_producer(node: Node) -> None:
    pid, epoch = begin(node, (0,))
    idle_pid, idle_epoch = begin(node, (1,), tid="committed")
    node.coord.end_txn("committed", idle_pid, idle_epoch, committed=True)
    start = node.coord.txns[TID].start_ms
    node.coord.sweep(now_ms=start + TIMEOUT_MS)  # not yet past it
    assert node.coord.txns[TID].state is TxnState.ONGOING
    node.coord.sweep(now_ms=start + TIMEOUT_MS + 1)
    t = node.coord.txns[TID]
    assert (t.state, t.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    assert markers(node.log(0)) == [(2, pid, epoch + 1, False)]
    assert node.log(0).last_stable_offset == node.log(0).log_end_offset
    with pytest.raises(KafkaProtocolError) as e:
        node.coord.end_txn(TID, pid, epoch, committed=True)
    assert code_of(e) == ErrorCode.PRODUCER_FENCED
    # Transactions not open are left alone, however old.
    node.coord.sweep(now_ms=start + 100 * TIMEOUT_MS)
    assert node.coord.txns["committed"].state is TxnState.COMPLETE_COMMIT
    assert node.coord.txns["committed"].producer_epoch == idle_epoch
    # The producer comes back with InitProducerId and goes on at the next epoch.
    assert node.coord.init_producer_id(TID, TIMEOUT_MS) == (pid, epoch + 2)


def test_an_open_transaction_replayed_after_a_crash_still_times_out(tmp_path: Path) -> None:
    node = Node(tmp_path)
    pid, epoch = begin(node, (0,))
    start = node.coord.txns[TID].start_ms
    node = node.crash_and_reopen()
    node.coord.recover()
    node.coord.sweep(now_ms=start + TIMEOUT_MS + 1)
    assert node.coord.txns[TID].state is TxnState.COMPLETE_ABORT
    assert markers(node.log(0)) == [(2, pid, epoch + 1, False)]
    assert node.log(0).last_stable_offset == node.log(0).log_end_offset


# --- listing ----------------------------------------------------------------------------------


def test_list_filters_by_state_and_producer_id(node: Node) -> None:
    open_pid, _ = begin(node, (0,), tid="open")
    empty_pid, _ = node.coord.init_producer_id("empty", TIMEOUT_MS)

    def ids(**kw: object) -> set[str]:
        return {t.transactional_id for t in node.coord.list(**kw)}  # type: ignore[arg-type]

    assert ids(states=set(), producer_ids=set()) == {"open", "empty"}
    assert ids(states={"Ongoing"}, producer_ids=set()) == {"open"}
    assert ids(states={"Empty", "Ongoing"}, producer_ids={empty_pid}) == {"empty"}
    assert ids(states=set(), producer_ids={open_pid, empty_pid}) == {"open", "empty"}
    # min duration: only open transactions that old.
    assert ids(states=set(), producer_ids=set(), min_duration_ms=0) == {"open"}
    assert ids(states=set(), producer_ids=set(), min_duration_ms=3_600_000) == set()
