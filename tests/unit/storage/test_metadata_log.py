"""The broker's metadata log: frames round-trip, a torn or corrupt tail recovers to the
valid prefix, arbitrary bytes never crash it, refused records are not kept, compaction
keeps the latest accepted record of each key."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.storage.metadata_log import (
    COMPACT_MIN_RECORDS,
    METADATA_DIR,
    RECORDS_FILE,
    MetadataLog,
    MetadataLogError,
    MetadataRecord,
    decode_frames,
    encode_frame,
)


def replayed(data_dir: Path, kind: str = "k") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    log = MetadataLog(data_dir)
    log.replay(kind, lambda r: out.append((r.key, r.value)) is None)
    log.finish_replay()
    return out


def test_records_round_trip_across_opens(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path)
    assert not log.exists
    log.initialize([MetadataRecord("k", "a", {"x": 1})])
    log.replay("k", lambda r: True)
    log.finish_replay()
    log.append([MetadataRecord("k", "b", [1, "two"]), MetadataRecord("other", "a", True)])
    log.append([MetadataRecord("k", "a", None)])
    assert replayed(tmp_path) == [("a", {"x": 1}), ("b", [1, "two"]), ("a", None)]
    assert replayed(tmp_path, "other") == [("a", True)]


def test_initialize_is_atomic_and_once(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path)
    log.initialize([])
    assert log.exists and log.path.read_bytes() == b""
    with pytest.raises(Exception, match="exists already"):
        MetadataLog(tmp_path).initialize([])


@pytest.mark.parametrize("cut", [1, 5, 9, 12])
def test_a_torn_tail_is_truncated_to_the_valid_prefix(
        tmp_path: Path, cut: int, caplog: pytest.LogCaptureFixture) -> None:
    MetadataLog(tmp_path).append([MetadataRecord("k", "a", 1), MetadataRecord("k", "b", 2)])
    path = tmp_path / METADATA_DIR / RECORDS_FILE
    first = len(encode_frame(MetadataRecord("k", "a", 1)))
    whole = path.read_bytes()
    path.write_bytes(whole[: first + cut])
    with caplog.at_level(logging.ERROR):
        assert replayed(tmp_path) == [("a", 1)]
    assert f"truncating to the {first} valid bytes" in caplog.text
    assert path.stat().st_size == first
    MetadataLog(tmp_path).append([MetadataRecord("k", "c", 3)])  # appends after the cut
    assert replayed(tmp_path) == [("a", 1), ("c", 3)]


def test_a_corrupt_record_ends_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    MetadataLog(tmp_path).append([MetadataRecord("k", "a", 1), MetadataRecord("k", "b", 2)])
    path = tmp_path / METADATA_DIR / RECORDS_FILE
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.ERROR):
        assert replayed(tmp_path) == [("a", 1)]
    assert "CRC mismatch" in caplog.text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash_decoding(data: bytes) -> None:
    records, valid, why = decode_frames(data)
    assert 0 <= valid <= len(data)
    assert (why is None) == (valid == len(data))
    assert decode_frames(data[:valid])[0] == records


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.integers(),
                                                          st.text(max_size=20))), max_size=8))
def test_frames_round_trip(items: list[tuple[str, object]]) -> None:
    data = b"".join(encode_frame(MetadataRecord("k", key, value)) for key, value in items)
    records, valid, why = decode_frames(data)
    assert why is None and valid == len(data)
    assert [(r.key, r.value) for r in records] == items


def test_refused_records_are_not_kept_and_compaction_keeps_the_latest_accepted(
        tmp_path: Path) -> None:
    records = [MetadataRecord("k", "user", {"v": 0}),
               MetadataRecord("k", "user", {"v": "forged"})]  # refused on replay
    records += [MetadataRecord("k", f"tmp{i % 3}", i) for i in range(COMPACT_MIN_RECORDS)]
    records.append(MetadataRecord("k", "tmp0", None))
    path = tmp_path / METADATA_DIR / RECORDS_FILE
    path.parent.mkdir()
    path.write_bytes(b"".join(encode_frame(r) for r in records))  # as written over time
    before = path.stat().st_size

    log = MetadataLog(tmp_path)
    log.replay("k", lambda r: r.value != {"v": "forged"})
    log.finish_replay()  # compacts: many records, few keys
    assert path.stat().st_size < before
    assert replayed(tmp_path) == [("user", {"v": 0}), ("tmp1", COMPACT_MIN_RECORDS - 3),
                                  ("tmp2", COMPACT_MIN_RECORDS - 2)]


def test_appends_compact_as_they_go(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path)
    for i in range(5 * COMPACT_MIN_RECORDS):
        log.append([MetadataRecord("k", "same", i)])
    assert log.path.stat().st_size < 3 * COMPACT_MIN_RECORDS * len(
        encode_frame(MetadataRecord("k", "same", 0)))
    seen = replayed(tmp_path)
    assert len(seen) <= COMPACT_MIN_RECORDS and seen[-1] == ("same", 5 * COMPACT_MIN_RECORDS - 1)


def test_a_leftover_compaction_file_is_ignored(tmp_path: Path) -> None:
    MetadataLog(tmp_path).append([MetadataRecord("k", "a", 1)])
    (tmp_path / METADATA_DIR / "records.tmp").write_bytes(b"half a compaction")
    assert replayed(tmp_path) == [("a", 1)]
    assert not (tmp_path / METADATA_DIR / "records.tmp").exists()


def test_a_failed_append_keeps_nothing_and_leaves_no_tail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = MetadataLog(tmp_path)
    log.append([MetadataRecord("k", "a", 1)])
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(MetadataLogError, match="Input/output error"):
        log.append([MetadataRecord("k", "b", 2)])
    monkeypatch.setattr(os, "fsync", real_fsync)
    log.append([MetadataRecord("k", "c", 3)])
    assert replayed(tmp_path) == [("a", 1), ("c", 3)]
