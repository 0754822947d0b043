"""``headrace.protocol.columnar`` against batches written by an independent encoder
(kafka-python's ``DefaultRecordBatchBuilder``, the client's own), every codec, headers, null
keys and values, LogAppendTime, offset windows, aborted transactions and corrupt input."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from headrace.protocol.columnar import decode, split
from headrace.protocol.records import (
    CRC_OFFSET,
    TIMESTAMP_TYPE_MASK,
    CorruptBatchError,
    build_control_batch,
    compute_crc,
    rewrite_base_offset,
)

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]

records_st = st.lists(st.tuples(
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3),
    st.integers(0, 10**6),
), min_size=1, max_size=30)


def batch(records: list[Record], base_offset: int, codec: int = 0, base_ts: int = 1_700_000_000_000,
          producer_id: int = -1, transactional: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, transactional, producer_id, 0 if producer_id >= 0
                                        else -1, 0 if producer_id >= 0 else -1, 1 << 24)
    for i, (key, value, headers, dt) in enumerate(records):
        builder.append(i, base_ts + dt, key, value, headers)
    raw = bytearray(builder.build())
    rewrite_base_offset(raw, 0, base_offset, 0)
    return bytes(raw)


def rows(records: bytes, low: int = 0, high: int = 1 << 62, read_committed: bool = False,
         aborted: list[tuple[int, int]] | None = None, headers: bool = True) -> list[Any]:
    sections, _after = split(records, low, read_committed, aborted or [])
    c = decode(sections, low, high, headers)
    assert c.headers is not None or not headers
    return list(zip(c.key.to_pylist(), c.value.to_pylist(), c.offset.to_pylist(),
                    c.timestamp_ms.to_pylist(), c.timestamp_type.to_pylist(),
                    c.headers.to_pylist() if c.headers is not None else [None] * len(c),
                    strict=True))


def expected(records: list[Record], base_offset: int, base_ts: int = 1_700_000_000_000
             ) -> list[Any]:
    return [(k, v, base_offset + i, base_ts + dt, 0, [{"key": hk, "value": hv} for hk, hv in h])
            for i, (k, v, h, dt) in enumerate(records)]


@settings(max_examples=60, deadline=None)
@given(records_st, st.sampled_from([0, 1, 2, 3, 4]), st.integers(0, 10**9))
def test_round_trip_every_codec(records: list[Record], codec: int, base: int) -> None:
    assert rows(batch(records, base, codec), low=0) == expected(records, base)


@settings(max_examples=30, deadline=None)
@given(records_st, records_st, st.data())
def test_offset_window_across_batches(a: list[Record], b: list[Record], data: Any) -> None:
    raw = batch(a, 100) + batch(b, 100 + len(a))
    everything = expected(a, 100) + expected(b, 100 + len(a))
    low = data.draw(st.integers(90, 100 + len(everything)))
    high = data.draw(st.integers(low, 110 + len(everything)))
    assert rows(raw, low, high) == [r for r in everything if low <= r[2] < high]


@settings(max_examples=40, deadline=None)
@given(records_st, records_st, st.booleans(), st.booleans(), st.booleans(), st.booleans(),
       st.integers(0, 5))
def test_fields_not_asked_for_are_left_out_and_the_rest_is_the_same(
        a: list[Record], b: list[Record], key: bool, value: bool, meta: bool, headers: bool,
        skip: int) -> None:
    sections, _ = split(batch(a, 100) + batch(b, 100 + len(a), codec=1), 0, False, [])
    full = decode(sections, 100 + skip, 1 << 62, True)
    part = decode(sections, 100 + skip, 1 << 62, headers, with_key=key, with_value=value,
                  with_meta=meta)
    assert len(part) == len(full) == max(len(a) + len(b) - skip, 0)
    for name, wanted in (("key", key), ("value", value), ("offset", meta),
                         ("timestamp_ms", meta), ("timestamp_type", meta),
                         ("headers", headers)):
        column = getattr(part, name)
        if wanted:
            assert column is not None and column.equals(getattr(full, name)), name
        else:
            assert column is None, name


def test_without_headers_column() -> None:
    rec: list[Record] = [(b"k", b"v", [("h", b"x")], 0)]
    sections, _ = split(batch(rec, 0), 0, False, [])
    assert decode(sections, 0, 10, False).headers is None


def test_log_append_time_takes_the_batch_max_timestamp() -> None:
    raw = bytearray(batch([(None, b"a", [], 5), (None, b"b", [], 9)], 0))
    attributes_at = CRC_OFFSET + 4
    struct.pack_into(">h", raw, attributes_at, TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", raw, attributes_at + 2 + 4 + 8, 42)  # max timestamp
    struct.pack_into(">I", raw, CRC_OFFSET, compute_crc(raw, 0, len(raw)))
    assert [(r[3], r[4]) for r in rows(bytes(raw))] == [(42, 1), (42, 1)]


def test_aborted_transactions_and_markers_are_dropped_under_read_committed() -> None:
    committed = batch([(None, b"c1", [], 0), (None, b"c2", [], 0)], 0, producer_id=7,
                      transactional=True)
    commit = bytearray(build_control_batch(7, 0, committed=True))
    rewrite_base_offset(commit, 0, 2, 0)
    aborted = batch([(None, b"a1", [], 0)], 3, producer_id=8, transactional=True)
    abort = bytearray(build_control_batch(8, 0, committed=False))
    rewrite_base_offset(abort, 0, 4, 0)
    later = batch([(None, b"a-again", [], 0)], 5, producer_id=8, transactional=True)
    raw = committed + bytes(commit) + aborted + bytes(abort) + later
    values = [r[1] for r in rows(raw, read_committed=True, aborted=[(8, 3)])]
    assert values == [b"c1", b"c2", b"a-again"]  # the abort marker ends the aborted run
    assert [r[1] for r in rows(raw)] == [b"c1", b"c2", b"a1", b"a-again"]
    _, after = split(raw, 0, True, [(8, 3)])
    assert after == 6


def test_torn_last_batch_is_left_for_the_next_fetch() -> None:
    first, second = batch([(None, b"x", [], 0)], 0), batch([(None, b"y", [], 0)], 1)
    sections, after = split(first + second[:-3], 0, False, [])
    assert after == 1
    assert decode(sections, 0, 10, False).value.to_pylist() == [b"x"]


def test_crc_mismatch_is_a_clear_error() -> None:
    raw = bytearray(batch([(None, b"hello", [], 0)], 0))
    raw[-2] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC mismatch"):
        split(bytes(raw), 0, False, [])


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=200))
def test_arbitrary_records_section_never_crashes(garbage: bytes) -> None:
    """A records section that passed the CRC (a buggy producer) but is not records:
    decoded or refused with CorruptBatchError, never a crash or an out-of-bounds read."""
    from headrace.protocol.columnar import _sections
    sections = _sections([garbage], [(len(garbage), 5, 0, 0, -1)])
    with contextlib.suppress(CorruptBatchError):
        decode(sections, 0, 10, True)
