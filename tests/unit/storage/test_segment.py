"""One segment: appends, chunked scanning, index building, lookups, recovery."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.protocol.records import BatchHeader, build_batch, parse_header
from headrace.storage.segment import Segment, segment_name
from tests.unit.storage.support import RECORDS


def write_batches(
    seg: Segment, sizes: list[int], timestamps: list[int] | None = None
) -> list[tuple[int, BatchHeader, bytes]]:
    """Append one batch per entry of ``sizes`` (records per batch), offsets contiguous
    from ``seg.next_offset``; returns ``(position, header, bytes)`` of each."""
    out = []
    for i, n in enumerate(sizes):
        ts = timestamps[i] if timestamps else 1000 + i
        data = build_batch([(b"k", b"value-%d" % j) for j in range(n)],
                           base_offset=seg.next_offset, timestamp_ms=ts)
        header = parse_header(data)
        pos = seg.size
        seg.append(data, [header])
        out.append((pos, header, data))
    return out


def index_entries(seg: Segment) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    offsets = [seg.offset_index._get(i) for i in range(seg.offset_index.entries)]
    times = [seg.time_index._get(i) for i in range(seg.time_index.entries)]
    return offsets, times


def rebuilt(
    entries: tuple[list[tuple[int, int]], list[tuple[int, int]]], interval: int = 1
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The index entries a recovery rebuild produces from those appends produced.

    A fresh segment counts bytes from zero, so appends first index a batch only once
    ``index_interval_bytes`` have been written, while a rebuild indexes the first batch at
    position 0 too; from there on both index the same batches. (Harmless: a lookup with
    no entry also starts at position 0.)
    """
    offsets, times = entries
    if offsets[:1] != [(0, 0)] and interval > 0 and times:
        offsets = [(0, 0), *offsets]
    return offsets, times


def test_segment_name_is_zero_padded_base_offset() -> None:
    assert segment_name(0) == "00000000000000000000"
    assert segment_name(1234) == "00000000000000001234"


def test_new_segment_creates_its_three_files(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 42, 4096)
    assert seg.path == tmp_path / "00000000000000000042.log"
    assert {p.name for p in tmp_path.iterdir()} == {
        "00000000000000000042.log", "00000000000000000042.index",
        "00000000000000000042.timeindex"}
    assert (seg.size, seg.next_offset, seg.max_timestamp) == (0, 42, -1)
    assert abs(seg.created_ms - time.time() * 1000) < 60_000
    seg.close()


def test_append_then_scan_and_read(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 100, 4096)
    written = write_batches(seg, [1, 3, 2])
    assert seg.next_offset == 106
    assert seg.size == sum(len(d) for _, _, d in written)
    assert seg.path.read_bytes() == b"".join(d for _, _, d in written)
    assert [(p, h) for p, h in seg.iter_batches()] == [(p, h) for p, h, _ in written]
    for pos, h, data in written:
        assert seg.read(pos, h.size) == data
    seg.close()


def test_index_interval_bytes_controls_offset_index_density(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 0, 0)  # interval 0: every batch indexed
    written = write_batches(seg, [1, 1, 1])
    offsets, _ = index_entries(seg)
    assert offsets == [(h.base_offset, p) for p, h, _ in written]
    seg.close()

    (tmp_path / "sparse").mkdir()
    sparse = Segment(tmp_path / "sparse", 0, 10**9)
    write_batches(sparse, [1, 1, 1])
    offsets, _ = index_entries(sparse)
    assert offsets == []  # nothing reached the interval; lookups start at position 0
    assert sparse.position_for(2) == 0
    assert sparse.find_batch(2) is not None
    sparse.close()


def test_find_batch_returns_the_batch_holding_the_offset(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 10, 1)
    written = write_batches(seg, [3, 1, 4])  # offsets 10-12, 13, 14-17
    for offset in range(10, 18):
        pos, h = seg.find_batch(offset)
        assert h.base_offset <= offset <= h.last_offset
        assert (pos, h) in [(p, hh) for p, hh, _ in written]
    assert seg.find_batch(18) is None
    assert seg.find_batch(5)[1].base_offset == 10  # below the segment: its first batch
    seg.close()


def test_time_index_records_new_maxima_only(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 0, 4096)
    write_batches(seg, [2, 1, 1, 3], timestamps=[500, 400, 700, 700])
    _, times = index_entries(seg)
    assert times == [(500, 0), (700, 3)]
    assert seg.max_timestamp == 700
    seg.close()


def test_existing_segment_takes_created_ms_from_mtime(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 0, 4096)
    write_batches(seg, [1])
    seg.close()
    os.utime(seg.path, (1_000_000, 1_000_000))
    again = Segment(tmp_path, 0, 4096)
    assert again.created_ms == 1_000_000_000
    again.close()


def test_delete_removes_all_files(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 7, 4096)
    write_batches(seg, [1])
    seg.delete()
    assert list(tmp_path.iterdir()) == []


def test_clean_recovery_trusts_the_index_and_scans_from_its_last_entry(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 0, 200)
    write_batches(seg, [1] * 10, timestamps=[10 * i for i in range(10)])
    before = index_entries(seg)
    seg.close()
    again = Segment(tmp_path, 0, 200)
    assert again.recover(full=False) == 0
    assert index_entries(again) == before  # trusted, not rebuilt
    assert again.next_offset == 10
    assert again.max_timestamp == 90
    again.close()


def test_recovery_with_index_pointing_past_the_end_rebuilds(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 0, 1)
    written = write_batches(seg, [1, 2, 1])
    before = index_entries(seg)
    seg.offset_index.append(9, 10**6)  # points past the log end: suspect
    seg.close()
    again = Segment(tmp_path, 0, 1)
    assert again.recover(full=False) == 0
    assert index_entries(again) == rebuilt(before)
    assert again.next_offset == written[-1][1].last_offset + 1
    again.close()


def test_recovery_of_empty_segment(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 5, 4096)
    seg.close()
    for full in (True, False):
        again = Segment(tmp_path, 5, 4096)
        assert again.recover(full=full) == 0
        assert (again.size, again.next_offset, again.max_timestamp) == (0, 5, -1)
        again.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(RECORDS, st.integers(0, 10**6)), min_size=1, max_size=15),
       st.integers(1, 400), st.sampled_from([0, 1, 100, 4096]))
def test_chunked_scan_and_full_recovery_match_what_was_appended(
    batches, chunk_size, interval
) -> None:
    with tempfile.TemporaryDirectory() as d:
        seg = Segment(Path(d), 50, interval)
        written = []
        for records, ts in batches:
            data = build_batch(records, base_offset=seg.next_offset, timestamp_ms=ts)
            h = parse_header(data)
            written.append((seg.size, h))
            seg.append(data, [h])
        # Chunks smaller than a batch take the one-large-batch path; any chunk size works.
        assert list(seg.iter_batches(chunk_size=chunk_size)) == written
        assert list(seg.iter_batches(check_crc=True, chunk_size=chunk_size)) == written
        built = index_entries(seg)
        next_offset, max_ts = seg.next_offset, seg.max_timestamp
        seg.close()

        again = Segment(Path(d), 50, interval)
        assert again.recover(full=True) == 0
        assert index_entries(again) == rebuilt(built, interval)
        assert (again.next_offset, again.max_timestamp) == (next_offset, max_ts)
        for pos, h in written:
            for offset in range(h.base_offset, h.last_offset + 1):
                assert again.find_batch(offset) == (pos, h)
        again.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(RECORDS, min_size=1, max_size=15), st.sampled_from([0, 1, 150, 4096]),
       st.data())
def test_walk_headers_and_last_boundary(records_list, interval, data) -> None:
    with tempfile.TemporaryDirectory() as d:
        seg = Segment(Path(d), 0, interval)
        for records in records_list:
            batch = build_batch(records, base_offset=seg.next_offset)
            seg.append(batch, [parse_header(batch)])
        written = list(seg.iter_batches(check_crc=True))
        starts = [p for p, _ in written]
        ends = [p + h.size for p, h in written]
        assert list(seg.walk_headers(0)) == written
        start = data.draw(st.sampled_from(starts), label="start")
        stop = data.draw(st.integers(start, seg.size + 10), label="stop")
        assert list(seg.walk_headers(start, stop)) == [
            (p, h) for p, h in written if start <= p < stop]
        # The largest batch end <= limit reachable from start, else start itself.
        limit = data.draw(st.integers(start, seg.size + 10), label="limit")
        reachable = [e for e in ends if start < e <= limit]
        assert seg.last_boundary(start, limit) == (reachable[-1] if reachable else start)
        seg.close()

