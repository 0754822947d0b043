"""Idempotent-producer state: duplicates, sequence gaps, epochs, wrap-around."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.protocol.records import BatchHeader, build_batch, parse_header
from headrace.storage.producer_state import (
    INT32_MAX,
    MAX_BATCHES_KEPT,
    BatchMetadata,
    ProducerStateManager,
    last_sequence,
)

PID = 1000


def header(seq: int, count: int = 1, epoch: int = 0, base_offset: int = 0, pid: int = PID,
           attributes: int = 0) -> BatchHeader:
    h = parse_header(build_batch([(None, b"v")] * count, producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq, attributes=attributes))
    return replace(h, base_offset=base_offset)


class Producer:
    """Appends batches the way PartitionLog does: check, then observe with offsets."""

    def __init__(self, state: ProducerStateManager) -> None:
        self.state = state
        self.next_offset = 0

    def append(self, h: BatchHeader) -> BatchMetadata | None:
        dup = self.state.check(h)
        if dup is None:
            self.state.observe(replace(h, base_offset=self.next_offset))
            self.next_offset += h.last_offset_delta + 1
        return dup


def expect_error(state: ProducerStateManager, h: BatchHeader, code: ErrorCode) -> None:
    with pytest.raises(KafkaProtocolError) as info:
        state.check(h)
    assert info.value.code == code


def test_last_sequence() -> None:
    assert last_sequence(header(0, 1)) == 0
    assert last_sequence(header(10, 5)) == 14
    assert last_sequence(header(INT32_MAX, 1)) == INT32_MAX
    assert last_sequence(header(INT32_MAX, 2)) == 0
    assert last_sequence(header(INT32_MAX - 1, 5)) == 2
    assert last_sequence(header(-1, 3)) == -1


def test_unknown_producer_may_start_at_any_sequence() -> None:
    state = ProducerStateManager()
    assert state.check(header(0)) is None
    assert state.check(header(12345)) is None


def test_batches_without_producer_id_or_sequence_are_not_tracked() -> None:
    state = ProducerStateManager()
    plain = parse_header(build_batch([(None, b"v")]))
    assert state.check(plain) is None
    state.observe(plain)
    assert state.producers == {}
    state.observe(header(-1))
    assert state.check(header(-1)) is None


def test_control_batches_record_no_sequences() -> None:
    state = ProducerStateManager()
    state.observe(header(-1, attributes=0x30), committed=True)
    assert state.producers[PID].batches == deque()


def test_transactions_open_and_close_with_markers() -> None:
    state = ProducerStateManager()
    state.observe(header(0, 2, base_offset=10, attributes=0x10))
    state.observe(header(2, 1, base_offset=12, attributes=0x10))
    state.observe(header(0, 1, base_offset=13, pid=PID + 1, attributes=0x10))
    assert state.first_unstable_offset() == 10  # the LSO: oldest open transaction
    state.observe(header(-1, base_offset=14, attributes=0x30), committed=True)
    assert state.first_unstable_offset() == 13
    state.observe(header(-1, base_offset=15, pid=PID + 1, attributes=0x30), committed=False)
    assert state.first_unstable_offset() is None
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in state.aborted] == [
        (PID + 1, 13, 15)]
    assert state.aborted_between(0, 13) == []
    assert len(state.aborted_between(14, 20)) == 1
    state.forget_aborted_before(16)
    assert state.aborted == []


def test_a_marker_with_a_new_epoch_fences_the_old_one() -> None:
    state = ProducerStateManager()
    state.observe(header(0, 1, epoch=0, base_offset=0, attributes=0x10))
    state.observe(header(-1, epoch=1, base_offset=1, attributes=0x30), committed=False)
    with pytest.raises(KafkaProtocolError) as e:
        state.check(header(1, 1, epoch=0, attributes=0x10))
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert state.check(header(0, 1, epoch=1, attributes=0x10)) is None  # new epoch: seq 0


def test_snapshot_round_trip_keeps_transactions() -> None:
    state = ProducerStateManager()
    state.observe(header(0, 2, base_offset=10, attributes=0x10))
    state.observe(header(0, 1, base_offset=12, pid=PID + 1, attributes=0x10))
    state.observe(header(-1, base_offset=13, pid=PID + 1, attributes=0x30), committed=False)
    again = ProducerStateManager()
    again.restore(json.loads(json.dumps(state.snapshot())))
    assert again.snapshot() == state.snapshot()
    assert again.first_unstable_offset() == 10


def test_in_order_batches_are_accepted() -> None:
    p = Producer(ProducerStateManager())
    for seq, count in [(0, 3), (3, 1), (4, 10), (14, 2)]:
        assert p.append(header(seq, count)) is None
    assert p.state.producers[PID].last_seq == 15


def test_duplicates_among_the_last_five_are_detected_with_their_offsets() -> None:
    p = Producer(ProducerStateManager())
    seqs = [(0, 2), (2, 1), (3, 3), (6, 1), (7, 2), (9, 1), (10, 4)]
    for seq, count in seqs:
        p.append(header(seq, count))
    offsets = {0: (0, 1), 2: (2, 2), 3: (3, 5), 6: (6, 6), 7: (7, 8), 9: (9, 9), 10: (10, 13)}
    for seq, count in seqs[-MAX_BATCHES_KEPT:]:
        dup = p.state.check(header(seq, count))
        assert dup == BatchMetadata(seq, seq + count - 1, *offsets[seq])
    # Older than the last five: no longer recognised, and not the next sequence either.
    for seq, count in seqs[:-MAX_BATCHES_KEPT]:
        expect_error(p.state, header(seq, count), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


def test_same_first_sequence_with_different_length_is_not_a_duplicate() -> None:
    p = Producer(ProducerStateManager())
    p.append(header(0, 3))
    expect_error(p.state, header(0, 2), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


@pytest.mark.parametrize("seq", [1, 4, 6, 100])
def test_out_of_order_sequence(seq: int) -> None:
    p = Producer(ProducerStateManager())
    p.append(header(0, 3))
    p.append(header(3, 2))  # next expected: 5
    expect_error(p.state, header(seq), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert p.state.check(header(5)) is None


def test_stale_epoch_is_fenced() -> None:
    p = Producer(ProducerStateManager())
    p.append(header(0, epoch=3))
    expect_error(p.state, header(1, epoch=2), ErrorCode.INVALID_PRODUCER_EPOCH)
    expect_error(p.state, header(0, epoch=0), ErrorCode.INVALID_PRODUCER_EPOCH)  # even a dup


def test_epoch_bump_must_start_at_sequence_zero() -> None:
    p = Producer(ProducerStateManager())
    p.append(header(0, 5, epoch=0))
    expect_error(p.state, header(5, epoch=1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    expect_error(p.state, header(1, epoch=1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert p.append(header(0, 2, epoch=1)) is None
    assert p.state.producers[PID].epoch == 1
    # The new epoch's history replaced the old one; the old epoch is now fenced.
    assert p.state.check(header(0, 2, epoch=1)) is not None
    expect_error(p.state, header(5, epoch=0), ErrorCode.INVALID_PRODUCER_EPOCH)
    assert p.state.check(header(2, epoch=1)) is None


def test_sequence_wraps_at_int32_max() -> None:
    p = Producer(ProducerStateManager())
    p.append(header(INT32_MAX - 2, 3))  # last sequence INT32_MAX
    expect_error(p.state, header(1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert p.append(header(0, 2)) is None  # wraps to 0
    assert p.state.producers[PID].last_seq == 1


def test_batch_straddling_the_wrap() -> None:
    p = Producer(ProducerStateManager())
    p.append(header(INT32_MAX - 1, 1))
    assert p.append(header(INT32_MAX, 3)) is None  # sequences INT32_MAX, 0, 1
    assert p.state.producers[PID].last_seq == 1
    dup = p.state.check(header(INT32_MAX, 3))
    assert dup is not None and (dup.first_seq, dup.last_seq) == (INT32_MAX, 1)
    expect_error(p.state, header(0), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert p.state.check(header(2)) is None


def test_producers_are_independent() -> None:
    p = Producer(ProducerStateManager())
    p.append(header(0, pid=1))
    p.append(header(0, 2, pid=2))
    assert p.state.check(header(1, pid=1)) is None
    assert p.state.check(header(2, pid=2)) is None
    expect_error(p.state, header(2, pid=1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


@given(st.lists(st.integers(1, 5), min_size=1, max_size=30), st.data())
def test_retries_of_recent_batches_are_answered_with_their_offsets(counts, data) -> None:
    """A producer with up to five batches in flight retries some of them: the recent ones
    come back as duplicates with the original offsets, never appended twice."""
    p = Producer(ProducerStateManager())
    sent: list[tuple[BatchHeader, int, int]] = []  # header, first offset, last offset
    seq = data.draw(st.integers(0, INT32_MAX), label="first sequence")
    for count in counts:
        h = header(seq, count)
        first = p.next_offset
        assert p.append(h) is None
        sent.append((h, first, p.next_offset - 1))
        seq = (seq + count) % (INT32_MAX + 1)
        for _ in range(data.draw(st.integers(0, 2))):
            h_old, first_old, last_old = data.draw(st.sampled_from(sent[-MAX_BATCHES_KEPT:]))
            before = p.next_offset
            dup = p.append(h_old)
            assert dup is not None
            assert (dup.first_offset, dup.last_offset) == (first_old, last_old)
            assert p.next_offset == before


def test_idle_producers_expire_unless_in_a_transaction() -> None:
    state = ProducerStateManager()
    idle = parse_header(build_batch([(None, b"v")], producer_id=1, producer_epoch=0,
                                    base_sequence=0, timestamp_ms=1_000))
    busy = parse_header(build_batch([(None, b"v")], producer_id=2, producer_epoch=0,
                                    base_sequence=0, timestamp_ms=1_000, attributes=0x10))
    recent = parse_header(build_batch([(None, b"v")], producer_id=3, producer_epoch=0,
                                      base_sequence=0, timestamp_ms=90_000))
    for h in (idle, busy, recent):
        state.observe(h)
    assert state.expire(now_ms=100_000, expiration_ms=50_000) == 1
    assert set(state.producers) == {2, 3}  # the open transaction keeps producer 2
    # An expired producer is unknown again: any sequence is accepted.
    assert state.check(replace(idle, base_sequence=7)) is None
