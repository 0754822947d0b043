"""PartitionLog: offsets, reads, rolling, timestamp lookups, retention."""

from __future__ import annotations

import os
import struct
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.protocol.records import HEADER_SIZE, compute_crc, parse_header, validate_batches
from headrace.storage.config import LogConfig
from headrace.storage.errors import OffsetOutOfRangeError
from headrace.storage.log import PartitionLog
from tests.unit.storage.support import (
    RECORDS,
    Stored,
    append,
    append_raw,
    batches,
    consume_all,
    make_batch,
    reopen,
    segment_files,
)

NO_RETENTION = LogConfig(retention_ms=-1, retention_bytes=-1)


def new_log(path: Path, **config: int) -> PartitionLog:
    return PartitionLog(path / "topic-0", LogConfig(**config), recover_fully=False)


# --- append -----------------------------------------------------------------------------


def test_empty_log(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 1000).data == b""
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp() is None
    log.close()


def test_offsets_are_contiguous_across_batches(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    a = append(log, 3)
    b = append(log, 1)
    c = append(log, 5)
    assert [(s.base_offset, s.last_offset) for s in (a, b, c)] == [(0, 2), (3, 3), (4, 8)]
    assert log.log_end_offset == 9
    # The stored bytes carry the assigned base offsets.
    assert [h.base_offset for h in batches(consume_all(log))] == [0, 3, 4]
    log.close()


def test_append_of_several_batches_at_once(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 2)
    data = make_batch(3) + make_batch(1) + make_batch(2)
    result = append_raw(log, data)
    assert (result.base_offset, result.last_offset, result.log_start_offset) == (2, 7, 0)
    assert [h.base_offset for h in validate_batches(data)] == [2, 5, 6]  # rewritten in place
    assert log.read(2, 1 << 20).data == bytes(data)
    log.close()


def test_append_stamps_leader_epoch_and_keeps_crc(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data = make_batch(2)
    log.append(data, validate_batches(data), leader_epoch=7)
    [h] = validate_batches(log.read(0, 1000).data)
    assert h.partition_leader_epoch == 7
    log.close()


def test_appends_continue_after_reopen(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 4)
    log.flush()
    log = reopen(log, recover_fully=False)
    assert log.log_end_offset == 4
    assert append(log, 1).base_offset == 4
    log.close()


# --- read -------------------------------------------------------------------------------


def test_read_outside_the_log_raises(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)
    result = log.read(3, 1000)  # the log end itself is in range: nothing yet
    assert (result.data, result.high_watermark, result.log_start_offset) == (b"", 3, 0)
    log.close()


def test_read_from_the_middle_of_a_batch_returns_that_batch(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    first = append(log, 1)
    middle = append(log, 5)  # offsets 1-5
    for offset in middle.offsets:
        data = log.read(offset, len(middle.data)).data
        assert data == middle.data
    assert log.read(0, len(first.data)).data == first.data
    log.close()


def test_read_honours_max_bytes_with_whole_batches_only(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    stored = [append(log, n) for n in (1, 2, 3, 1)]
    sizes = [len(s.data) for s in stored]
    everything = b"".join(s.data for s in stored)
    assert log.read(0, sum(sizes)).data == everything
    assert log.read(0, sum(sizes) - 1).data == everything[: sum(sizes[:3])]
    assert log.read(0, sizes[0] + sizes[1] + HEADER_SIZE).data == everything[: sum(sizes[:2])]
    assert log.read(1, sizes[1]).data == stored[1].data
    log.close()


def test_read_region_is_the_byte_range_read_returns(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=250)
    stored = [append(log, n) for n in (1, 2, 3, 1, 2)]
    for s in stored:
        for max_bytes in (0, 50, 200, 1 << 20):
            expected = log.read(s.base_offset, max_bytes)
            result = log.read_region(s.base_offset, max_bytes)
            assert (result.high_watermark, result.log_start_offset) == (
                expected.high_watermark, expected.log_start_offset)
            if expected.data == b"":
                assert result.region is None
                continue
            with result.region as region:
                assert region.length == len(expected.data)
                assert region.read() == expected.data
    assert log.read_region(log.log_end_offset, 1000).region is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read_region(log.log_end_offset + 1, 1000)
    log.close()


def test_read_region_outlives_retention_of_its_segment(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=10, retention_bytes=0, retention_ms=-1)
    first = append(log, 2)
    append(log, 1)
    region = log.read_region(0, 1 << 20).region
    assert region is not None
    assert log.enforce_retention(now_ms=0) == 1
    assert not segment_files(log.directory, 0)[0].exists()
    try:
        assert region.read() == first.data  # its own descriptor keeps the file alive
    finally:
        region.close()
        region.close()  # idempotent
    log.close()


def test_oversized_first_batch_with_and_without_min_one(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    big = append(log, [(b"k", b"x" * 500)])
    append(log, 1)
    assert log.read(0, 100).data == big.data
    assert log.read(0, 100, min_one=True).data == big.data
    assert log.read(0, 100, min_one=False).data == b""
    assert log.read(0, 0, min_one=False).data == b""
    log.close()


@settings(max_examples=50, deadline=None)
@given(st.lists(RECORDS, min_size=1, max_size=20), st.integers(200, 1500),
       st.sampled_from([0, 150, 4096]), st.integers(0, 1200), st.booleans())
def test_read_model(records_list, segment_bytes, interval, max_bytes, min_one) -> None:
    """Every offset in the log reads back as whole stored batches, starting with the one
    holding it, from its own segment, within ``max_bytes`` (or exactly one batch)."""
    with tempfile.TemporaryDirectory() as d:
        log = PartitionLog(Path(d), LogConfig(segment_bytes=segment_bytes,
                                              index_interval_bytes=interval),
                           recover_fully=False)
        stored = [append(log, r) for r in records_list]
        segment_of = {}
        for seg in log.segments:
            for h in batches(seg.read(0, seg.size)):
                segment_of[h.base_offset] = seg.base_offset
        assert sorted(segment_of) == [s.base_offset for s in stored]
        for i, s in enumerate(stored):
            for offset in s.offsets:
                data = log.read(offset, max_bytes, min_one=min_one).data
                if len(s.data) > max_bytes:
                    assert data == (s.data if min_one else b"")
                    continue
                # A prefix of the stored batches from this one on, within one segment.
                same_segment = [t for t in stored[i:]
                                if segment_of[t.base_offset] == segment_of[s.base_offset]]
                fitting, total = [], 0
                for t in same_segment:
                    if total + len(t.data) > max_bytes:
                        break
                    fitting.append(t.data)
                    total += len(t.data)
                assert data == b"".join(fitting)
        assert consume_all(log, max_bytes=max(max_bytes, 1)) == b"".join(s.data for s in stored)
        log.close()


# --- rolling ----------------------------------------------------------------------------


def test_roll_by_size(tmp_path: Path) -> None:
    one = len(make_batch(1))
    log = new_log(tmp_path, segment_bytes=2 * one)
    stored = [append(log, 1) for _ in range(5)]
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    assert [s.size for s in log.segments] == [2 * one, 2 * one, one]
    for seg in log.segments:
        assert all(p.exists() for p in segment_files(log.directory, seg.base_offset))
    assert consume_all(log) == b"".join(s.data for s in stored)
    log.close()


def test_batch_larger_than_segment_bytes_gets_its_own_segment(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=100)
    append(log, 1)
    big = append(log, [(b"k", b"x" * 300)])
    append(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 1, 2]
    assert log.segments[1].size == len(big.data)
    log.close()


def test_empty_active_segment_is_never_rolled(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=10, segment_ms=0)
    append(log, [(b"k", b"x" * 300)])
    assert len(log.segments) == 1
    log.close()


def test_roll_by_age(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_ms=60_000)
    append(log, 1)
    append(log, 1)
    assert len(log.segments) == 1
    log.segments[-1].created_ms = int(time.time() * 1000) - 61_000
    append(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 2]
    append(log, 1)  # the new segment is young
    assert len(log.segments) == 2
    log.close()


def test_roll_by_age_uses_file_mtime_after_reopen(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_ms=60_000)
    append(log, 1)
    log.close()
    old = time.time() - 3600
    os.utime(log.segments[0].path, (old, old))
    log = PartitionLog(log.directory, log.config, recover_fully=False)
    append(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 1]
    log.close()


def test_segment_ms_zero_rolls_every_append(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_ms=0)
    for _ in range(3):
        log.segments[-1].created_ms -= 1  # at least one millisecond old
        append(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 1, 2]
    log.close()


def test_explicit_roll_and_reads_across_segment_boundaries(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    a = append(log, 3)
    log.roll()
    assert log.read(3, 1000).data == b""  # the new active segment is empty
    b = append(log, 2)
    log.roll()
    c = append(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 3, 5]
    # A read returns batches from one segment; a consumer moves on by offset.
    assert log.read(0, 1 << 20).data == a.data
    assert log.read(3, 1 << 20).data == b.data
    assert log.read(4, 1 << 20).data == b.data
    assert log.read(5, 1 << 20).data == c.data
    assert consume_all(log) == a.data + b.data + c.data
    log = reopen(log, recover_fully=False)
    assert [s.base_offset for s in log.segments] == [0, 3, 5]
    assert consume_all(log) == a.data + b.data + c.data
    log.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(RECORDS, min_size=1, max_size=20), st.integers(100, 1000))
def test_segments_respect_segment_bytes(records_list, segment_bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = PartitionLog(Path(d), LogConfig(segment_bytes=segment_bytes), recover_fully=False)
        stored = [append(log, r) for r in records_list]
        for seg, nxt in zip(log.segments, log.segments[1:], strict=False):
            hs = batches(seg.read(0, seg.size))
            assert seg.size <= segment_bytes or len(hs) == 1
            first_of_next = batches(nxt.read(0, nxt.size))[0]
            assert seg.size + first_of_next.size > segment_bytes
            assert nxt.base_offset == hs[-1].last_offset + 1
        assert consume_all(log) == b"".join(s.data for s in stored)
        log.close()


# --- timestamps -------------------------------------------------------------------------


def test_offset_for_timestamp_at_batch_granularity(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 2, timestamp_ms=100)  # 0-1
    append(log, 3, timestamp_ms=300)  # 2-4
    append(log, 1, timestamp_ms=200)  # 5
    append(log, 1, timestamp_ms=400)  # 6
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(100) == (0, 100)
    assert log.offset_for_timestamp(101) == (2, 300)
    assert log.offset_for_timestamp(250) == (2, 300)  # not the later 200 batch
    assert log.offset_for_timestamp(301) == (6, 400)
    assert log.offset_for_timestamp(401) is None
    assert log.max_timestamp() == (6, 400)
    log.close()


def expected_for_timestamp(stored: list[Stored], ts: int) -> tuple[int, int] | None:
    for s in stored:
        if s.max_timestamp >= ts:
            return s.base_offset, s.max_timestamp
    return None


def expected_max_timestamp(stored: list[Stored]) -> tuple[int, int] | None:
    best = max((s.max_timestamp for s in stored), default=-1)
    return expected_for_timestamp(stored, best) if best >= 0 else None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 1000)), min_size=1, max_size=25),
       st.integers(150, 800), st.sampled_from([0, 200, 4096]), st.booleans())
def test_timestamp_lookups_model(batches_ts, segment_bytes, interval, reopened) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = PartitionLog(Path(d), LogConfig(segment_bytes=segment_bytes,
                                              index_interval_bytes=interval),
                           recover_fully=False)
        stored = [append(log, n, timestamp_ms=ts) for n, ts in batches_ts]
        if reopened:
            log = reopen(log, recover_fully=True)
        for ts in {t for _, t in batches_ts} | {0, 1001} | {t + 1 for _, t in batches_ts}:
            assert log.offset_for_timestamp(ts) == expected_for_timestamp(stored, ts)
        assert log.max_timestamp() == expected_max_timestamp(stored)
        log.close()


# --- retention --------------------------------------------------------------------------


def test_retention_by_bytes_deletes_whole_old_segments(tmp_path: Path) -> None:
    one = len(make_batch(1))
    log = new_log(tmp_path, segment_bytes=2 * one, retention_bytes=3 * one, retention_ms=-1)
    stored = [append(log, 1) for _ in range(7)]  # segments 0,2,4 full; 6 active
    old_files = segment_files(log.directory, 0) + segment_files(log.directory, 2)
    assert log.enforce_retention(now_ms=0) == 2
    assert [s.base_offset for s in log.segments] == [4, 6]
    assert log.log_start_offset == 4
    assert not any(p.exists() for p in old_files)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 1000)
    assert consume_all(log) == b"".join(s.data for s in stored[4:])
    assert log.enforce_retention(now_ms=0) == 0
    assert append(log, 1).base_offset == 7
    log = reopen(log, recover_fully=True)
    assert (log.log_start_offset, log.log_end_offset) == (4, 8)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)
    log.close()


def test_retention_never_deletes_the_active_segment(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=10, retention_bytes=0, retention_ms=0)
    for _ in range(3):
        append(log, 1, timestamp_ms=1)
    assert len(log.segments) == 3
    assert log.enforce_retention(now_ms=10**12) == 2
    assert [s.base_offset for s in log.segments] == [2]
    assert log.enforce_retention(now_ms=10**12) == 0
    assert consume_all(log) != b""
    log.close()


def test_retention_by_time_uses_each_segments_max_timestamp(tmp_path: Path) -> None:
    log = new_log(tmp_path, retention_ms=1000, retention_bytes=-1)
    append(log, 1, timestamp_ms=5000)
    append(log, 1, timestamp_ms=1000)  # segment 0 max 5000
    log.roll()
    append(log, 1, timestamp_ms=2000)  # segment 2 max 2000
    log.roll()
    append(log, 1, timestamp_ms=100)  # active
    assert log.enforce_retention(now_ms=5900) == 0  # segment 0 not expired: stop there
    assert log.enforce_retention(now_ms=6001) == 2  # both old ones; never the active
    assert log.log_start_offset == 3
    log.close()


def test_retention_disabled(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=10, retention_bytes=-1, retention_ms=-1)
    for _ in range(3):
        append(log, 1)
    assert log.enforce_retention(now_ms=10**15) == 0
    assert len(log.segments) == 3
    log.close()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 10_000)), min_size=1,
                max_size=25),
       st.integers(100, 600), st.integers(0, 3000))
def test_retention_by_bytes_model(batches_ts, segment_bytes, retention_bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = PartitionLog(Path(d), LogConfig(segment_bytes=segment_bytes, retention_ms=-1,
                                              retention_bytes=retention_bytes),
                           recover_fully=False)
        stored = [append(log, n, timestamp_ms=ts) for n, ts in batches_ts]
        before = [(s.base_offset, s.size) for s in log.segments]
        deleted = log.enforce_retention(now_ms=0)
        after = [(s.base_offset, s.size) for s in log.segments]
        assert after == before[deleted:]  # whole oldest segments only
        assert len(after) >= 1
        remaining = sum(size for _, size in after)
        if deleted:
            assert remaining >= retention_bytes  # never deleted more than needed
        if len(after) > 1:
            assert remaining - after[0][1] < retention_bytes  # nothing more was deletable
        kept = [s for s in stored if s.base_offset >= log.log_start_offset]
        assert consume_all(log) == b"".join(s.data for s in kept)
        assert sorted(p.name for p in Path(d).iterdir() if p.suffix != ".snapshot") == sorted(
            p.name for base, _ in after for p in segment_files(Path(d), base))
        log.close()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 10_000)), min_size=1,
                max_size=25),
       st.integers(100, 600), st.integers(0, 5000), st.integers(0, 20_000))
def test_retention_by_time_model(batches_ts, segment_bytes, retention_ms, now_ms) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = PartitionLog(Path(d), LogConfig(segment_bytes=segment_bytes,
                                              retention_ms=retention_ms, retention_bytes=-1),
                           recover_fully=False)
        for n, ts in batches_ts:
            append(log, n, timestamp_ms=ts)
        before = list(log.segments)
        expected = 0
        for seg in before[:-1]:
            if now_ms - seg.max_timestamp > retention_ms:
                expected += 1
            else:
                break
        assert log.enforce_retention(now_ms) == expected
        assert log.segments == before[expected:]
        log.close()


# --- idempotent appends -----------------------------------------------------------------


def test_retried_batch_returns_original_offsets_and_writes_nothing(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    first = append(log, 2, producer_id=9, producer_epoch=0, base_sequence=0)
    append(log, 1)
    size = log.size_bytes
    retry = make_batch(2, producer_id=9, producer_epoch=0, base_sequence=0)
    result = append_raw(log, retry)
    assert (result.base_offset, result.last_offset) == (first.base_offset, first.last_offset)
    assert log.size_bytes == size
    assert log.log_end_offset == 3
    log.close()


def test_duplicate_inside_a_multi_batch_append_is_rejected(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 2, producer_id=9, producer_epoch=0, base_sequence=0)
    data = make_batch(2, producer_id=9, producer_epoch=0, base_sequence=0) + make_batch(1)
    with pytest.raises(KafkaProtocolError) as info:
        append_raw(log, data)
    assert info.value.code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    assert log.log_end_offset == 2
    log.close()


def test_sequence_gap_is_rejected_before_anything_is_written(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 2, producer_id=9, producer_epoch=3, base_sequence=0)
    size = log.size_bytes
    with pytest.raises(KafkaProtocolError) as info:
        append(log, 1, producer_id=9, producer_epoch=3, base_sequence=5)
    assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(KafkaProtocolError) as info:
        append(log, 1, producer_id=9, producer_epoch=2, base_sequence=2)
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert (log.size_bytes, log.log_end_offset) == (size, 2)
    log.close()


def test_consecutive_batches_of_one_producer_in_one_append(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 4, producer_id=9, producer_epoch=0, base_sequence=0)
    data = (make_batch(2, producer_id=9, producer_epoch=0, base_sequence=4)
            + make_batch(2, producer_id=9, producer_epoch=0, base_sequence=6))
    result = append_raw(log, data)
    assert (result.base_offset, result.last_offset) == (4, 7)
    log.close()


def test_offsets_beyond_the_segments_relative_range_roll_a_new_segment(
    tmp_path: Path,
) -> None:
    log = new_log(tmp_path)
    for i in range(4):
        data = make_batch(1, timestamp_ms=1000 + i)
        struct.pack_into(">i", data, 23, 2**31 - 2)  # lastOffsetDelta
        struct.pack_into(">i", data, 57, 2**31 - 1)  # recordCount
        # Flagged compressed: validation cannot bound the record count without inflating.
        struct.pack_into(">h", data, 21, 1)
        struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
        append_raw(log, data)
    assert log.log_end_offset == 4 * (2**31 - 1)
    log = reopen(log, recover_fully=True)
    assert log.log_end_offset == 4 * (2**31 - 1)
    log.close()


def test_flush_is_safe_to_call_repeatedly(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=100)
    log.flush()  # nothing written yet
    for _ in range(3):
        append(log, 1)
    log.flush()
    log.flush()
    assert parse_header(log.read(0, 1000).data).base_offset == 0
    log.close()
