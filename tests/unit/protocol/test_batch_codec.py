"""Records inside batches: parsing against kafka-python's encoder, rebuilding with every
codec, empty batches, delete horizons and LogAppendTime stamping (CRC kept valid)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from headrace.protocol.batch_codec import (
    DELETE_HORIZON_FLAG,
    batch_records,
    build_empty_batch,
    build_raw_batch,
    copy_record,
    delete_horizon,
    has_null_key,
    parse_records,
    stamp_log_append_time,
)
from headrace.protocol.errors import ProtocolError
from headrace.protocol.records import parse_header, validate_batches

RECORD = st.tuples(st.none() | st.binary(max_size=70), st.none() | st.binary(max_size=300),
                   st.integers(-5000, 5000))


def build(records: list[tuple[bytes | None, bytes | None, int]], codec: int = 0,
          base_ts: int = 1_000_000) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                  producer_id=3, producer_epoch=1, base_sequence=7,
                                  batch_size=1 << 20)
    for i, (k, v, dt) in enumerate(records):
        b.append(i, base_ts + dt, k, v, [("h", b"x" * (i % 3))])
    return bytes(b.build())


@settings(max_examples=150, deadline=None)
@given(st.lists(RECORD, min_size=1, max_size=80), st.integers(0, 4), st.data())
def test_filter_and_rebuild_round_trip(records: list, codec: int, data: st.DataObject) -> None:
    raw = build(records, codec)
    (h,) = validate_batches(raw)
    buf, views = batch_records(raw, h)
    original = list(DefaultRecordBatch(raw))
    assert [(v.offset_delta, v.key, v.has_value) for v in views] == [
        (r.offset - h.base_offset, r.key, r.value is not None) for r in original]
    keep = data.draw(st.lists(st.booleans(), min_size=len(views), max_size=len(views)))
    if not any(keep):
        keep[0] = True
    shift = data.draw(st.integers(-10_000, 10_000))
    kept = [v for v, k in zip(views, keep, strict=True) if k]
    rebuilt = build_raw_batch(h, b"".join(copy_record(buf, v, shift) for v in kept), len(kept),
                              attributes=h.attributes | DELETE_HORIZON_FLAG,
                              base_timestamp=h.base_timestamp + shift,
                              max_timestamp=h.max_timestamp)
    nh = parse_header(rebuilt)
    assert (nh.base_offset, nh.last_offset_delta, nh.compression, nh.base_sequence) == (
        h.base_offset, h.last_offset_delta, h.compression, h.base_sequence)
    assert delete_horizon(nh) == h.base_timestamp + shift
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in DefaultRecordBatch(rebuilt)]
    assert got == [(r.offset, r.timestamp, r.key, r.value, r.headers)
                   for r, k in zip(original, keep, strict=True) if k]


def test_empty_batch_keeps_the_producer_fields() -> None:
    raw = build([(b"k", b"v", 0), (b"k", b"w", 5)], codec=4)
    (h,) = validate_batches(raw)
    empty = build_empty_batch(h)
    e = parse_header(empty)
    assert (e.record_count, e.last_offset_delta, e.producer_id, e.producer_epoch,
            e.base_sequence, e.compression) == (0, h.last_offset_delta, 3, 1, 7, 0)
    assert e.base_timestamp == e.max_timestamp == h.max_timestamp
    assert list(DefaultRecordBatch(empty)) == []
    DefaultRecordBatch(empty).validate_crc()


def test_log_append_time_stamp_keeps_the_crc_valid() -> None:
    raw = bytearray(build([(b"k", b"v", 0), (b"k", b"w", -40)], codec=1))
    (h,) = validate_batches(raw)
    stamped = stamp_log_append_time(raw, 0, h, 1_800_000_000_000)
    assert validate_batches(raw) == [stamped]
    assert stamped.attributes & 0x08
    assert [(r.timestamp, r.timestamp_type) for r in DefaultRecordBatch(bytes(raw))] == [
        (1_800_000_000_000, 1)] * 2


def test_null_keys_and_malformed_records() -> None:
    raw = build([(b"k", b"v", 0), (None, b"w", 0)])
    (h,) = validate_batches(raw)
    assert has_null_key(raw, h)
    with pytest.raises(ProtocolError):
        parse_records(b"\x7f\x00", 1)  # length beyond the buffer
    with pytest.raises(ProtocolError):
        parse_records(batch_records(raw, h)[0] + b"\x00", 2)  # trailing bytes
    with pytest.raises(ProtocolError):
        batch_records(raw[:61] + b"garbage" * 10, h)


@given(st.binary(max_size=200), st.integers(0, 5))
def test_parse_never_crashes_on_garbage(data: bytes, count: int) -> None:
    with contextlib.suppress(ProtocolError):
        parse_records(data, count)
