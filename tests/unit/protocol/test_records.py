"""Record batches (magic v2): golden bytes, CRC-32C, round-trips through kafka-python.

kafka-python is the independent oracle here: its ``DefaultRecordBatchBuilder`` encodes
batches the way a real producer does, its ``DefaultRecordBatch``/``MemoryRecords`` read
them the way a real consumer does, and ``kafka.record._crc32c`` is a pure-Python CRC-32C
that shares no code with the ``crc32c`` package we use.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record._crc32c import crc as pure_python_crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from headrace.protocol.errors import ProtocolError
from headrace.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    CorruptBatchError,
    UnsupportedMagicError,
    build_batch,
    compute_crc,
    encode_record,
    magic_at,
    parse_header,
    rewrite_base_offset,
    scan_batches,
    validate_batches,
)

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
FIELD = st.none() | st.binary(max_size=40)
RECORDS = st.lists(st.tuples(FIELD, FIELD), min_size=1, max_size=12)
TIMESTAMP = st.integers(0, 2**50)

# --- golden bytes ----------------------------------------------------------------------

# build_batch([(b"k", b"v")]), written out field by field from the v2 format spec.
GOLDEN_RECORD = bytes.fromhex(
    "10"  # record length: varint(8), zigzag -> 0x10
    "00"  # record attributes
    "00"  # timestampDelta varint(0)
    "00"  # offsetDelta varint(0)
    "02" "6b"  # key length varint(1) -> 0x02, b"k"
    "02" "76"  # value length varint(1) -> 0x02, b"v"
    "00"  # header count varint(0)
)
GOLDEN_CRC = 0xFE917CAB
GOLDEN_BATCH = (
    bytes.fromhex(
        "0000000000000000"  # baseOffset 0
        "0000003a"  # batchLength 58 = 70 - 12
        "00000000"  # partitionLeaderEpoch 0
        "02"  # magic 2
    )
    + struct.pack(">I", GOLDEN_CRC)
    + bytes.fromhex(
        "0000"  # attributes
        "00000000"  # lastOffsetDelta 0
        "0000000000000000"  # baseTimestamp 0
        "0000000000000000"  # maxTimestamp 0
        "ffffffffffffffff"  # producerId -1
        "ffff"  # producerEpoch -1
        "ffffffff"  # baseSequence -1
        "00000001"  # recordCount 1
    )
    + GOLDEN_RECORD
)


def kafka_python_batch(
    records: list[tuple[bytes | None, bytes | None]],
    timestamp_ms: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    headers: list[tuple[str, bytes]] | None = None,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        batch_size=1 << 24)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=timestamp_ms, key=key, value=value, headers=headers or [])
    return bytes(builder.build())


def read_with_kafka_python(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of a record set as kafka-python's consumer sees it (CRC checked)."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc()
        out.extend((r.offset, r.key, r.value) for r in batch)
    return out


def test_golden_single_record_batch() -> None:
    batch = build_batch([(b"k", b"v")])
    assert len(GOLDEN_BATCH) == 70
    assert batch == GOLDEN_BATCH


def test_golden_crc_is_crc32c_of_attributes_to_end() -> None:
    assert pure_python_crc32c(GOLDEN_BATCH[ATTRIBUTES_OFFSET:]) == GOLDEN_CRC
    assert compute_crc(GOLDEN_BATCH, 0, len(GOLDEN_BATCH)) == GOLDEN_CRC


def test_compute_crc_is_castagnoli_check_value() -> None:
    # The standard CRC-32C check value: CRC of b"123456789" is 0xE3069283.
    assert compute_crc(b"\xaa" * ATTRIBUTES_OFFSET + b"123456789", 0, 30) == 0xE3069283
    # ... at any position in the buffer.
    buf = b"xyz" + b"\xaa" * ATTRIBUTES_OFFSET + b"123456789" + b"trailing"
    assert compute_crc(buf, 3, 30) == 0xE3069283


def test_golden_batch_matches_kafka_python_builder() -> None:
    assert kafka_python_batch([(b"k", b"v")]) == GOLDEN_BATCH


def test_golden_header_fields() -> None:
    h = parse_header(GOLDEN_BATCH)
    assert h == BatchHeader(
        base_offset=0, batch_length=58, partition_leader_epoch=0, magic=2, crc=GOLDEN_CRC,
        attributes=0, last_offset_delta=0, base_timestamp=0, max_timestamp=0, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, record_count=1)
    assert h.size == 70
    assert h.last_offset == 0
    assert h.compression == 0
    assert not h.is_transactional
    assert not h.is_control


def test_golden_encode_record() -> None:
    assert encode_record(0, 0, b"k", b"v") == GOLDEN_RECORD
    # Null key and value are length -1: zigzag varint 0x01; body of 6 bytes -> 0x0c.
    assert encode_record(0, 0, None, None) == bytes.fromhex("0c" "00" "00" "00" "01" "01" "00")
    # Deltas are zigzag varints too: offsetDelta 300 -> 0xd8 0x04, timestampDelta -1 -> 0x01.
    assert encode_record(300, -1, b"", None) == bytes.fromhex("0e" "00" "01" "d804" "00" "01" "00")


def test_encode_record_with_headers_matches_kafka_python() -> None:
    headers = [("h1", b"x"), ("h2", b"")]
    built = kafka_python_batch([(b"key", b"value")], headers=headers)
    assert built[HEADER_SIZE:] == encode_record(0, 0, b"key", b"value", headers)
    records = list(DefaultRecordBatch(built))
    assert records[0].headers == headers


def test_build_batch_needs_records() -> None:
    with pytest.raises(ValueError):
        build_batch([])


def test_header_flag_properties() -> None:
    h = parse_header(build_batch([(None, b"v")], attributes=0x10 | 0x20 | 0x04))
    assert h.compression == 4
    assert h.is_transactional
    assert h.is_control


def test_magic_at() -> None:
    assert magic_at(GOLDEN_BATCH) == 2
    assert magic_at(b"\x00" * MAGIC_OFFSET) == -1
    assert magic_at(b"\x00" * MAGIC_OFFSET + b"\x01") == 1
    assert magic_at(b"..." + GOLDEN_BATCH, 3) == 2


def test_parse_header_needs_61_bytes() -> None:
    with pytest.raises(ProtocolError):
        parse_header(GOLDEN_BATCH[: HEADER_SIZE - 1])
    with pytest.raises(ProtocolError):
        parse_header(GOLDEN_BATCH, len(GOLDEN_BATCH) - HEADER_SIZE + 1)


# --- round-trips -----------------------------------------------------------------------


@given(RECORDS, TIMESTAMP)
def test_build_batch_is_byte_identical_to_kafka_python(records, timestamp_ms) -> None:
    assert build_batch(records, timestamp_ms=timestamp_ms) == kafka_python_batch(
        records, timestamp_ms=timestamp_ms)


@given(RECORDS, TIMESTAMP, st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1),
       st.integers(0, 2**31 - 1))
def test_build_batch_with_producer_state_matches_kafka_python(
    records, timestamp_ms, producer_id, epoch, sequence
) -> None:
    ours = build_batch(records, timestamp_ms=timestamp_ms, producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=sequence)
    theirs = kafka_python_batch(records, timestamp_ms=timestamp_ms, producer_id=producer_id,
                                producer_epoch=epoch, base_sequence=sequence)
    assert ours == theirs


@given(RECORDS, TIMESTAMP, INT64, st.integers(-1, 2**15 - 1), INT32)
def test_built_batches_validate_and_parse(records, timestamp_ms, pid, epoch, seq) -> None:
    data = build_batch(records, timestamp_ms=timestamp_ms, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)
    [h] = validate_batches(data)
    assert h == parse_header(data)
    assert h.size == len(data)
    assert h.batch_length == len(data) - LOG_OVERHEAD
    assert h.magic == 2
    assert h.record_count == len(records)
    assert h.last_offset_delta == len(records) - 1
    assert h.last_offset == h.base_offset + len(records) - 1
    assert (h.base_timestamp, h.max_timestamp) == (timestamp_ms, timestamp_ms)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (pid, epoch, seq)
    assert h.crc == pure_python_crc32c(data[ATTRIBUTES_OFFSET:])
    assert [(k, v) for _, k, v in read_with_kafka_python(data)] == records


@given(st.lists(RECORDS, min_size=1, max_size=6))
def test_concatenated_batches_validate_in_order(batches) -> None:
    datas = [build_batch(r) for r in batches]
    headers = validate_batches(b"".join(datas))
    assert [h.record_count for h in headers] == [len(r) for r in batches]
    assert [h.size for h in headers] == [len(d) for d in datas]
    positions = [pos for pos, _ in scan_batches(b"".join(datas))]
    assert positions == [sum(len(d) for d in datas[:i]) for i in range(len(datas))]


@given(st.lists(RECORDS, min_size=1, max_size=5), st.integers(0, 2**62),
       st.integers(0, 2**31 - 1))
def test_rewrite_base_offset_keeps_crc_and_kafka_python_reads_offsets(
    batches, base, leader_epoch
) -> None:
    data = bytearray(b"".join(build_batch(r) for r in batches))
    headers = validate_batches(data)
    pos, offset = 0, base
    for h in headers:
        rewrite_base_offset(data, pos, offset, leader_epoch)
        pos += h.size
        offset += h.last_offset_delta + 1
    rewritten = validate_batches(data)  # every CRC still valid
    assert [h.crc for h in rewritten] == [h.crc for h in headers]
    assert all(h.partition_leader_epoch == leader_epoch for h in rewritten)
    expected = [(base + i, k, v) for i, (k, v) in enumerate(r for b in batches for r in b)]
    assert read_with_kafka_python(bytes(data)) == expected
    batch = MemoryRecords(bytes(data)).next_batch()
    assert batch.base_offset == base
    assert batch.leader_epoch == leader_epoch


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_compressed_batches_validate(codec: int) -> None:
    records = [(f"key-{i}".encode(), b"compressible value " * 20) for i in range(50)]
    data = bytearray(kafka_python_batch(records, timestamp_ms=1_700_000_000_000,
                                        compression=codec))
    [h] = validate_batches(data)
    assert h.compression == codec  # the builder really compressed it
    assert h.record_count == 50
    assert h.last_offset_delta == 49
    assert h.size == len(data) < sum(len(k) + len(v) for k, v in records)
    rewrite_base_offset(data, 0, 1000, 3)
    validate_batches(data)
    assert read_with_kafka_python(bytes(data)) == [
        (1000 + i, k, v) for i, (k, v) in enumerate(records)]


def test_kafka_python_transactional_batch_validates() -> None:
    data = kafka_python_batch([(None, b"v")], producer_id=5, producer_epoch=1,
                              base_sequence=0, transactional=True)
    [h] = validate_batches(data)
    assert h.is_transactional
    assert not h.is_control
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (5, 1, 0)


# --- rejection -------------------------------------------------------------------------


def _valid_set(batches: list[list[tuple[bytes | None, bytes | None]]]) -> bytes:
    return b"".join(build_batch(r) for r in batches)


@given(st.lists(RECORDS, min_size=1, max_size=3), st.data())
def test_any_single_byte_corruption_in_crc_range_is_detected(batches, data) -> None:
    buf = bytearray(_valid_set(batches))
    headers = validate_batches(buf)
    which = data.draw(st.integers(0, len(headers) - 1))
    start = sum(h.size for h in headers[:which])
    # CRC-covered range (attributes to end) and the CRC field itself.
    pos = data.draw(st.integers(start + CRC_OFFSET, start + headers[which].size - 1))
    buf[pos] ^= data.draw(st.integers(1, 255))
    with pytest.raises(ProtocolError) as info:
        validate_batches(buf)
    if not isinstance(info.value, CorruptBatchError):
        # The count sanity checks run before the CRC check, so a flip in lastOffsetDelta
        # or recordCount is reported by them instead (both map to CORRUPT_MESSAGE).
        assert start + 23 <= pos < start + 27 or start + 57 <= pos < start + 61


@given(RECORDS, st.sampled_from([*range(0, 8), *range(12, 16)]), st.integers(1, 255))
def test_base_offset_and_leader_epoch_are_outside_the_crc(records, pos, xor) -> None:
    buf = bytearray(build_batch(records))
    buf[pos] ^= xor
    validate_batches(buf)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_unsupported(magic: int) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=None if magic == 0 else 1000, key=b"k", value=b"v")
    legacy = bytes(builder.build())
    assert magic_at(legacy) == magic
    with pytest.raises(UnsupportedMagicError):
        validate_batches(legacy)
    # ... also after a valid v2 batch.
    with pytest.raises(UnsupportedMagicError):
        validate_batches(GOLDEN_BATCH + legacy)


@given(st.integers(0, 255).filter(lambda m: m != 2))
def test_other_magic_is_unsupported(magic) -> None:
    buf = bytearray(GOLDEN_BATCH)
    buf[MAGIC_OFFSET] = magic
    with pytest.raises(UnsupportedMagicError):
        validate_batches(buf)


@given(st.lists(RECORDS, min_size=1, max_size=3), st.data())
def test_truncated_record_set_is_rejected(batches, data) -> None:
    datas = [build_batch(r) for r in batches]
    buf = b"".join(datas)
    boundaries = {sum(len(d) for d in datas[:i]) for i in range(len(datas) + 1)}
    cut = data.draw(st.integers(1, len(buf) - 1).filter(lambda c: c not in boundaries))
    with pytest.raises(ProtocolError):
        validate_batches(buf[:cut])


@given(st.lists(RECORDS, min_size=1, max_size=3), st.binary(min_size=1, max_size=200))
def test_trailing_garbage_is_rejected(batches, garbage) -> None:
    with pytest.raises(ProtocolError):
        validate_batches(_valid_set(batches) + garbage)


def test_empty_record_set_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        validate_batches(b"")


def _resealed(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return buf


@pytest.mark.parametrize("record_count", [0, -1])
def test_batch_without_records_is_rejected(record_count: int) -> None:
    buf = bytearray(GOLDEN_BATCH)
    struct.pack_into(">i", buf, 57, record_count)
    with pytest.raises(ProtocolError):
        validate_batches(_resealed(buf))


def test_negative_last_offset_delta_is_rejected() -> None:
    buf = bytearray(GOLDEN_BATCH)
    struct.pack_into(">i", buf, 23, -1)
    with pytest.raises(ProtocolError):
        validate_batches(_resealed(buf))


@pytest.mark.parametrize("batch_length", [-1, 0, HEADER_SIZE - LOG_OVERHEAD - 1, 59, 2**31 - 1])
def test_bad_batch_length_is_rejected(batch_length: int) -> None:
    buf = bytearray(GOLDEN_BATCH)
    struct.pack_into(">i", buf, 8, batch_length)
    with pytest.raises(ProtocolError):
        validate_batches(buf)


@pytest.mark.parametrize("count,delta", [(1, 5), (3, 0), (2, 2)])
def test_record_count_inconsistent_with_last_offset_delta_is_rejected(
    count: int, delta: int
) -> None:
    # Producers write recordCount == lastOffsetDelta + 1; anything else would make the
    # broker assign a different number of offsets than there are records (Kafka rejects
    # it too: "Inconsistent batch offset range"). The CRC is valid here.
    buf = bytearray(GOLDEN_BATCH)
    struct.pack_into(">i", buf, 23, delta)
    struct.pack_into(">i", buf, 57, count)
    with pytest.raises(ProtocolError) as info:
        validate_batches(_resealed(buf))
    assert not isinstance(info.value, CorruptBatchError)


@pytest.mark.parametrize("buf", [b"\x00" * 10, GOLDEN_BATCH + b"\x00" * 5],
                         ids=["short-set", "short-trailing-fragment"])
def test_short_fragment_is_not_classified_as_legacy_magic(buf: bytes) -> None:
    # Fewer than 17 bytes hold no magic byte: that is a truncated (corrupt) set, answered
    # with CORRUPT_MESSAGE, not a legacy one (UNSUPPORTED_FOR_MESSAGE_FORMAT).
    with pytest.raises(ProtocolError) as info:
        validate_batches(buf)
    assert not isinstance(info.value, UnsupportedMagicError)


# --- scanning --------------------------------------------------------------------------


def _assert_valid_prefix(buf: bytes, found: list[tuple[int, BatchHeader]]) -> None:
    expected_pos = 0
    for pos, h in found:
        assert pos == expected_pos
        assert pos + h.size <= len(buf)
        assert h == parse_header(buf, pos)
        assert h.magic == 2
        assert compute_crc(buf, pos, h.size) == h.crc
        expected_pos += h.size


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_scan_batches_on_arbitrary_bytes_never_raises(buf) -> None:
    found = list(scan_batches(buf))
    _assert_valid_prefix(buf, found)
    list(scan_batches(buf, check_crc=False))


@given(st.lists(RECORDS, max_size=4), st.binary(max_size=300))
def test_scan_batches_yields_exactly_the_valid_prefix(batches, garbage) -> None:
    datas = [build_batch(r) for r in batches]
    buf = b"".join(datas) + garbage
    found = list(scan_batches(buf))
    _assert_valid_prefix(buf, found)
    # Random garbage does not carry a matching CRC-32C (2**-32): the valid batches only.
    assert len(found) == len(datas)


@given(st.lists(RECORDS, min_size=1, max_size=4), st.data())
def test_scan_batches_stops_at_a_corrupt_batch(batches, data) -> None:
    buf = bytearray(_valid_set(batches))
    headers = validate_batches(buf)
    which = data.draw(st.integers(0, len(headers) - 1))
    start = sum(h.size for h in headers[:which])
    pos = data.draw(st.integers(start + ATTRIBUTES_OFFSET, start + headers[which].size - 1))
    buf[pos] ^= data.draw(st.integers(1, 255))
    found = list(scan_batches(buf))
    assert [p for p, _ in found] == [sum(h.size for h in headers[:i]) for i in range(which)]
    # Without the CRC check the framing is still intact, so every batch is yielded.
    assume(pos >= start + HEADER_SIZE)  # header fields also drive the framing checks
    assert len(list(scan_batches(buf, check_crc=False))) == len(headers)


@given(st.lists(RECORDS, min_size=1, max_size=3), st.data())
def test_scan_batches_on_truncated_set_yields_whole_batches_only(batches, data) -> None:
    datas = [build_batch(r) for r in batches]
    buf = b"".join(datas)
    cut = data.draw(st.integers(0, len(buf)))
    found = list(scan_batches(buf[:cut]))
    whole = [i for i in range(len(datas)) if sum(len(d) for d in datas[: i + 1]) <= cut]
    assert len(found) == len(whole)


def test_uncompressed_batch_claiming_more_records_than_fit_is_rejected() -> None:
    """A producer batch may not claim records its body cannot hold (it would consume
    offsets for records that do not exist)."""
    batch = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">i", batch, 23, 2**31 - 2)  # lastOffsetDelta
    struct.pack_into(">i", batch, 57, 2**31 - 1)  # recordCount
    struct.pack_into(">I", batch, 17, pure_python_crc32c(bytes(batch[21:])))
    with pytest.raises(ProtocolError, match="cannot fit"):
        validate_batches(batch)
