"""Sparse offset and time indexes: floor lookups, torn entries, truncation."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.storage.index import OffsetIndex, TimeIndex


def test_empty_offset_index_lookup_is_position_zero(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index")
    assert idx.entries == 0
    assert idx.last() is None
    assert idx.lookup(0) == 0
    assert idx.lookup(12345) == 0
    idx.close()


def test_offset_index_floor_lookup(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index")
    for rel, pos in [(0, 0), (10, 700), (25, 1400)]:
        idx.append(rel, pos)
    assert idx.lookup(0) == 0
    assert idx.lookup(9) == 0
    assert idx.lookup(10) == 700
    assert idx.lookup(24) == 700
    assert idx.lookup(25) == 1400
    assert idx.lookup(2**32) == 1400
    assert idx.last() == (25, 1400)
    idx.close()


def test_offset_index_floor_position(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index")
    assert idx.floor_position(100) == 0
    for rel, pos in [(0, 0), (10, 700), (25, 1400)]:
        idx.append(rel, pos)
    assert idx.floor_position(0) == 0
    assert idx.floor_position(699) == 0
    assert idx.floor_position(700) == 700
    assert idx.floor_position(1399) == 700
    assert idx.floor_position(10**9) == 1400
    idx.close()


def test_offset_index_entries_are_big_endian_u32_pairs(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index")
    idx.append(3, 0x01020304)
    idx.close()
    assert (tmp_path / "0.index").read_bytes() == bytes.fromhex("00000003" "01020304")


def test_offset_index_persists_across_reopen(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index")
    idx.append(0, 0)
    idx.append(4, 300)
    idx.close()
    again = OffsetIndex(tmp_path / "0.index")
    assert again.entries == 2
    assert again.lookup(5) == 300
    again.close()


def test_torn_offset_index_entry_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(struct.pack(">II", 0, 0) + struct.pack(">II", 7, 500) + b"\x00\x00\x00")
    idx = OffsetIndex(path)
    assert idx.entries == 2
    assert path.stat().st_size == 16
    assert idx.lookup(100) == 500
    idx.append(9, 800)  # appends land after the last whole entry
    assert idx.lookup(100) == 800
    idx.close()
    assert path.stat().st_size == 24


def test_torn_time_index_entry_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    path.write_bytes(struct.pack(">qI", 100, 0) + b"\x01" * 11)
    idx = TimeIndex(path)
    assert idx.entries == 1
    assert idx.max_timestamp() == 100
    idx.close()
    assert path.stat().st_size == 12


def test_offset_index_truncate_to_position(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index")
    for rel, pos in [(0, 0), (10, 700), (25, 1400)]:
        idx.append(rel, pos)
    idx.truncate_to_position(1400)
    assert idx.entries == 2
    assert idx.lookup(30) == 700
    idx.truncate_to_position(701)
    assert idx.entries == 2
    idx.truncate_to_position(0)
    assert idx.entries == 0
    idx.close()
    assert (tmp_path / "0.index").stat().st_size == 0


def test_time_index_keeps_only_increasing_timestamps(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "0.timeindex")
    assert idx.max_timestamp() == -1
    idx.append(100, 0)
    idx.append(100, 1)  # not greater: ignored
    idx.append(50, 2)  # smaller: ignored
    idx.append(200, 3)
    assert idx.entries == 2
    assert idx.max_timestamp() == 200
    assert idx.last() == (200, 3)
    idx.close()


def test_time_index_lookup_returns_the_entry_before_the_first_reaching_it(
    tmp_path: Path,
) -> None:
    idx = TimeIndex(tmp_path / "0.timeindex")
    for ts, rel in [(100, 0), (200, 5), (300, 9)]:
        idx.append(ts, rel)
    assert idx.lookup(0) == 0
    assert idx.lookup(100) == 0
    assert idx.lookup(101) == 0  # first reaching 101 is (200, 5): start at the one before
    assert idx.lookup(200) == 0
    assert idx.lookup(201) == 5
    assert idx.lookup(300) == 5
    assert idx.lookup(10**9) == 9
    idx.close()


def test_time_index_truncate_to_offset(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "0.timeindex")
    for ts, rel in [(100, 0), (200, 5), (300, 9)]:
        idx.append(ts, rel)
    idx.truncate_to_offset(6)
    assert idx.max_timestamp() == 200
    idx.truncate_to_offset(0)
    assert idx.entries == 0
    idx.close()


SORTED_U32 = st.lists(st.integers(0, 2**32 - 1), unique=True, max_size=60).map(sorted)


@given(SORTED_U32, st.lists(st.integers(0, 2**32 - 1), max_size=20))
def test_offset_index_lookup_is_a_floor_search(rels, probes) -> None:
    with tempfile.TemporaryDirectory() as d:
        idx = OffsetIndex(Path(d) / "0.index")
        for i, rel in enumerate(rels):
            idx.append(rel, i * 10)
        for probe in [*probes, *rels]:
            floor = [i for i, r in enumerate(rels) if r <= probe]
            assert idx.lookup(probe) == (floor[-1] * 10 if floor else 0)
        idx.close()


@given(st.lists(st.tuples(st.integers(-1, 10**6), st.integers(0, 1000)), max_size=60),
       st.lists(st.integers(-5, 10**6 + 5), max_size=20))
def test_time_index_is_strictly_increasing_and_lookup_is_conservative(entries, probes) -> None:
    with tempfile.TemporaryDirectory() as d:
        idx = TimeIndex(Path(d) / "0.timeindex")
        kept: list[tuple[int, int]] = []
        for ts, rel in entries:
            idx.append(ts, rel)
            if not kept or ts > kept[-1][0]:
                kept.append((ts, rel))
        assert [idx._get(i) for i in range(idx.entries)] == kept
        assert idx.max_timestamp() == (kept[-1][0] if kept else -1)
        for probe in probes:
            before = [rel for ts, rel in kept if ts < probe]
            assert idx.lookup(probe) == (before[-1] if before else 0)
        idx.close()


@settings(deadline=None)  # file I/O on a shared machine: no per-example time limit
@given(st.lists(st.one_of(st.tuples(st.just("append"), st.integers(0, 10**6)),
                          st.tuples(st.just("truncate"), st.integers(0, 30)),
                          st.just(("reopen", 0))), max_size=40))
def test_last_entry_always_matches_the_file(ops) -> None:
    """``last()`` is served from memory; it must equal the file's last entry after any mix
    of appends, truncations and reopening."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "0.timeindex"
        idx = TimeIndex(path)
        for op, n in ops:
            if op == "append":
                idx.append(n, n // 7)
            elif op == "truncate":
                idx.truncate(min(n, idx.entries))
            else:
                idx.close()
                idx = TimeIndex(path)
            on_disk = idx._get(idx.entries - 1) if idx.entries else None
            assert idx.last() == on_disk
        idx.close()
