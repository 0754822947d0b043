"""Crash recovery, fuzzed: a damaged tail recovers to exactly the valid prefix.

A crash is simulated by closing the file descriptors without ``LogManager.close()`` (no
flush, no clean-shutdown marker), then damaging the active segment the way a torn write
or a bad disk would, then reopening with ``recover_fully=True`` as the broker does after
an unclean shutdown.
"""

from __future__ import annotations

import os
import random
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.protocol.records import MAGIC_OFFSET, build_batch
from headrace.storage.config import LogConfig
from headrace.storage.errors import OffsetOutOfRangeError
from headrace.storage.log import PartitionLog
from tests.unit.storage.support import (
    RECORDS,
    Stored,
    append,
    batches,
    consume_all,
    make_batch,
    reopen,
    segment_files,
)

FUZZ = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@dataclass
class Built:
    directory: Path
    config: LogConfig
    stored: list[Stored]
    active_base: int

    def in_active(self) -> list[Stored]:
        return [s for s in self.stored if s.base_offset >= self.active_base]

    def before_active(self) -> list[Stored]:
        return [s for s in self.stored if s.base_offset < self.active_base]

    @property
    def active_path(self) -> Path:
        return segment_files(self.directory, self.active_base)[0]


def build_and_crash(directory: Path, batch_specs: list[tuple[list, int]],
                    config: LogConfig) -> Built:
    log = PartitionLog(directory, config, recover_fully=False)
    stored = [append(log, records, timestamp_ms=ts) for records, ts in batch_specs]
    active_base = log.segments[-1].base_offset
    log.close()  # the crash: no flush, no clean-shutdown marker
    return Built(directory, config, stored, active_base)


def assert_recovered(log: PartitionLog, built: Built, survivors: list[Stored],
                     damaged_size: int) -> None:
    """The reopened log holds exactly ``survivors``, with consistent indexes."""
    active_survivors = [s for s in survivors if s.base_offset >= built.active_base]
    expected_end = survivors[-1].last_offset + 1 if survivors else 0
    # Offsets, sizes, bytes.
    assert log.log_start_offset == 0
    assert log.log_end_offset == max(expected_end, built.active_base)
    assert log.segments[-1].base_offset == built.active_base
    kept = b"".join(s.data for s in active_survivors)
    assert log.truncated_bytes == damaged_size - len(kept)
    assert built.active_path.read_bytes() == kept
    assert log.segments[-1].size == len(kept)
    assert consume_all(log) == b"".join(s.data for s in survivors)
    # Every surviving offset reads back starting with its own batch.
    for s in survivors:
        for offset in (s.base_offset, s.last_offset):
            data = log.read(offset, 1 << 20).data
            assert data[: len(s.data)] == s.data
    assert log.read(log.log_end_offset, 1 << 20).data == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 1 << 20)
    # Indexes of the active segment point at the surviving batches only.
    seg = log.segments[-1]
    positions = {}
    pos = 0
    for s in active_survivors:
        positions[pos] = s
        pos += len(s.data)
    offset_entries = [seg.offset_index._get(i) for i in range(seg.offset_index.entries)]
    for rel, pos in offset_entries:
        assert pos in positions
        assert positions[pos].base_offset == seg.base_offset + rel
    assert offset_entries == sorted(offset_entries)
    if active_survivors:
        assert offset_entries[:1] == [(active_survivors[0].base_offset - seg.base_offset, 0)]
    running, expected_times = -1, []
    for s in active_survivors:
        if s.max_timestamp > running:
            running = s.max_timestamp
            expected_times.append((s.max_timestamp, s.base_offset - seg.base_offset))
    assert [seg.time_index._get(i) for i in range(seg.time_index.entries)] == expected_times
    assert seg.max_timestamp == running
    # Timestamp lookups agree with a scan of the survivors.
    for ts in {s.max_timestamp for s in built.stored} | {s.max_timestamp + 1 for s in built.stored}:
        want = next(((s.base_offset, s.max_timestamp) for s in survivors
                     if s.max_timestamp >= ts), None)
        assert log.offset_for_timestamp(ts) == want


def assert_appends_continue(log: PartitionLog, built: Built, survivors: list[Stored]) -> None:
    end = log.log_end_offset
    new = append(log, [(b"after", b"recovery")], timestamp_ms=5)
    assert new.base_offset == end
    assert log.read(end, 1 << 20).data == new.data
    # Crash again: the recovered prefix and the new batch are all there.
    log = reopen(log, recover_fully=True)
    assert log.truncated_bytes == 0
    assert log.log_end_offset == end + 1
    assert consume_all(log) == b"".join(s.data for s in survivors) + new.data
    log.close()


BATCHES = st.lists(st.tuples(RECORDS, st.integers(0, 10**6)), min_size=1, max_size=12)
CONFIGS = st.builds(
    LogConfig,
    segment_bytes=st.sampled_from([150, 400, 1 << 30]),
    index_interval_bytes=st.sampled_from([0, 1, 120, 4096]),
)


DAMAGES = ("truncate", "garbage", "truncate+garbage", "flip", "none")
INDEX_DAMAGES = st.sampled_from(["none", "delete", "garble", "torn"])


@st.composite
def damaged_tail(draw: st.DrawFn, layout: list[int],
                 kinds: tuple[str, ...] = DAMAGES) -> tuple[str, int, bytes, list]:
    """A damage to a file made of batches of sizes ``layout``. Returns (kind, cut, tail,
    flips): keep ``raw[:cut]`` with ``flips`` applied, then append ``tail``."""
    size = sum(layout)
    kind = draw(st.sampled_from(kinds))
    if kind == "truncate":
        return kind, draw(st.integers(0, size)), b"", []
    if kind == "garbage":
        return kind, size, draw(st.binary(min_size=1, max_size=300)), []
    if kind == "truncate+garbage":
        return (kind, draw(st.integers(0, size)), draw(st.binary(min_size=1, max_size=300)),
                [])
    if kind == "flip":
        # Mostly the last batch, sometimes an earlier one.
        which = draw(st.sampled_from([len(layout) - 1, *range(len(layout))]))
        start = sum(layout[:which])
        # batchLength, magic, CRC and everything the CRC covers: not baseOffset or
        # partitionLeaderEpoch, which no checksum covers (see the xfail tests below).
        covered = [*range(start + 8, start + 12),
                   *range(start + MAGIC_OFFSET, start + layout[which])]
        positions = draw(st.lists(st.sampled_from(covered), min_size=1, max_size=3,
                                  unique=True))
        flips = [(p, draw(st.integers(1, 255))) for p in positions]
        return kind, size, b"", flips
    return kind, size, b"", []


def crash_damage_recover(batch_specs: list, config: LogConfig, data: st.DataObject,
                         index_damage: str, kinds: tuple[str, ...] = DAMAGES) -> None:
    """Build a log, crash, damage the active segment, recover fully, check everything."""
    with tempfile.TemporaryDirectory() as d:
        built = build_and_crash(Path(d), batch_specs, config)
        active = built.in_active()
        layout = [len(s.data) for s in active]
        kind, cut, tail, flips = data.draw(damaged_tail(layout, kinds), label="damage")
        event(f"damage: {kind}")
        event("several segments" if built.active_base else "one segment")
        event(f"index damage: {index_damage}")

        raw = bytearray(built.active_path.read_bytes())
        assert raw == b"".join(s.data for s in active)
        damaged = raw[:cut]
        for pos, xor in flips:
            damaged[pos] ^= xor
        damaged += tail
        built.active_path.write_bytes(damaged)

        _, index_path, time_path = segment_files(built.directory, built.active_base)
        for path in (index_path, time_path):
            if index_damage == "delete":
                path.unlink()
            elif index_damage == "garble":
                path.write_bytes(data.draw(st.binary(max_size=64), label=f"{path.suffix} bytes"))
            elif index_damage == "torn":
                with open(path, "ab") as f:
                    f.write(b"\x00\x00\x01")

        # The expected survivors, from the damage alone: the batches still byte for byte
        # in place, up to the first that is not. (Garbage after a cut can rewrite the very
        # bytes it cut, e.g. a lost trailing 0x00 followed by a 0x00: then nothing is torn.)
        active_survivors = []
        start = 0
        for s, size in zip(active, layout, strict=True):
            if damaged[start:start + size] != raw[start:start + size]:
                break
            active_survivors.append(s)
            start += size
        survivors = built.before_active() + active_survivors

        log = PartitionLog(built.directory, config, recover_fully=True)  # must not raise
        assert_recovered(log, built, survivors, len(damaged))
        assert_appends_continue(log, built, survivors)


@FUZZ
@given(BATCHES, CONFIGS, st.data(), INDEX_DAMAGES)
def test_recovery_keeps_exactly_the_valid_prefix(batch_specs, config, data, index_damage):
    crash_damage_recover(batch_specs, config, data, index_damage)


@settings(FUZZ, max_examples=75)
@given(BATCHES, CONFIGS, st.data(), INDEX_DAMAGES)
def test_recovery_after_a_torn_write(batch_specs, config, data, index_damage):
    crash_damage_recover(batch_specs, config, data, index_damage,
                         kinds=("truncate", "truncate+garbage"))


@settings(FUZZ, max_examples=75)
@given(BATCHES, CONFIGS, st.data(), INDEX_DAMAGES)
def test_recovery_after_byte_flips(batch_specs, config, data, index_damage):
    crash_damage_recover(batch_specs, config, data, index_damage, kinds=("flip",))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=100), st.binary(max_size=100),
       st.booleans(), st.booleans())
def test_arbitrary_segment_bytes_never_crash_recovery(raw, index, timeindex, full, with_index):
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        log_path, index_path, time_path = segment_files(directory, 0)
        log_path.write_bytes(raw)
        if with_index and full:  # a full recovery rebuilds any index
            index_path.write_bytes(index)
            time_path.write_bytes(timeindex)
        log = PartitionLog(directory, LogConfig(index_interval_bytes=100), recover_fully=full)
        # Random bytes carry no valid CRC-32C: nothing survives, and the log works.
        assert log.log_end_offset == 0
        assert log.segments[0].size == 0
        assert log_path.read_bytes() == b""
        assert log.truncated_bytes == len(raw)
        assert append(log, 1).base_offset == 0
        log.close()


@settings(max_examples=60, deadline=None)
@given(BATCHES, st.binary(max_size=500), st.integers(0, 5000))
def test_valid_prefix_then_arbitrary_bytes(batch_specs, garbage, cut_back) -> None:
    """Whole batches written directly (as a crashed broker left them), then junk."""
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        good, offset = [], 0
        for records, ts in batch_specs:
            data = build_batch(records, base_offset=offset, timestamp_ms=ts)
            good.append(Stored(offset, offset + len(records) - 1, ts, data))
            offset += len(records)
        raw = b"".join(s.data for s in good)
        cut = max(0, len(raw) - cut_back)
        written = raw[:cut] + garbage
        segment_files(directory, 0)[0].write_bytes(written)
        survivors, start = [], 0
        for s in good:  # still byte for byte in place (the junk may rewrite what was cut)
            if written[start:start + len(s.data)] != s.data:
                break
            survivors.append(s)
            start += len(s.data)
        log = PartitionLog(directory, LogConfig(index_interval_bytes=150), recover_fully=True)
        built = Built(directory, log.config, good, 0)
        assert_recovered(log, built, survivors, cut + len(garbage))
        assert_appends_continue(log, built, survivors)


# --- indexes ------------------------------------------------------------------------------


def _multi_segment_log(directory: Path, timestamps: list[int] | None = None,
                       interval: int = 0) -> tuple[PartitionLog, list[Stored]]:
    log = PartitionLog(directory, LogConfig(index_interval_bytes=interval), recover_fully=False)
    stored = [append(log, 2, timestamp_ms=ts) for ts in (timestamps or [10, 20, 30, 40])]
    log.roll()
    stored.append(append(log, 1, timestamp_ms=50))
    return log, stored


@pytest.mark.parametrize("which", [".index", ".timeindex", "both"])
@pytest.mark.parametrize("segment", ["old", "active"])
def test_deleted_index_files_are_rebuilt(tmp_path: Path, which: str, segment: str) -> None:
    log, stored = _multi_segment_log(tmp_path)
    seg = log.segments[0 if segment == "old" else 1]
    before = ([seg.offset_index._get(i) for i in range(seg.offset_index.entries)],
              [seg.time_index._get(i) for i in range(seg.time_index.entries)])
    log.close()
    for suffix in ([".index", ".timeindex"] if which == "both" else [which]):
        seg.path.with_suffix(suffix).unlink()
    log = PartitionLog(tmp_path, log.config, recover_fully=True)
    again = log.segments[0 if segment == "old" else 1]
    after = ([again.offset_index._get(i) for i in range(again.offset_index.entries)],
             [again.time_index._get(i) for i in range(again.time_index.entries)])
    if which != ".timeindex" or segment == "active":
        assert after == before
    else:  # see test_deleted_time_index_of_an_old_segment_keeps_its_max_timestamp
        assert after[0] == before[0]
    assert log.log_end_offset == 9
    assert consume_all(log) == b"".join(s.data for s in stored)
    for s in stored:
        assert log.read(s.last_offset, 1 << 20).data[: len(s.data)] == s.data
        assert log.offset_for_timestamp(s.max_timestamp) == (s.base_offset, s.max_timestamp)
    assert log.max_timestamp() == (8, 50)
    log.close()


@pytest.mark.parametrize("recover_fully", [True, False])
def test_partially_written_index_entry_is_dropped(tmp_path: Path, recover_fully: bool) -> None:
    log, stored = _multi_segment_log(tmp_path)
    log.close()
    for base in (0, 8):
        for path in segment_files(tmp_path, base)[1:]:
            with open(path, "ab") as f:
                f.write(b"\x00\x00\x00\x09\x00")  # a torn entry (5 of 8 or 12 bytes)
    log = PartitionLog(tmp_path, log.config, recover_fully=recover_fully)
    for base in (0, 8):
        index_path, time_path = segment_files(tmp_path, base)[1:]
        assert index_path.stat().st_size % 8 == 0
        assert time_path.stat().st_size % 12 == 0
    assert log.truncated_bytes == 0
    assert log.log_end_offset == 9
    assert consume_all(log) == b"".join(s.data for s in stored)
    for s in stored:
        assert log.offset_for_timestamp(s.max_timestamp) == (s.base_offset, s.max_timestamp)
    assert append(log, 1).base_offset == 9
    log.close()


@st.composite
def garbled_index(draw: st.DrawFn, entry: struct.Struct, file_size: int) -> bytes:
    """Index bytes that look plausible: entries pointing inside the file (the dangerous
    kind: not obviously past the end), or any bytes at all, maybe with a torn tail."""
    if draw(st.booleans()):
        raw = draw(st.binary(max_size=80))
    else:
        small = st.integers(0, max(file_size - 1, 0))
        raw = b"".join(entry.pack(*draw(st.tuples(small, small)))
                       for _ in range(draw(st.integers(1, 6))))
    return raw + draw(st.binary(max_size=entry.size - 1))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_garbled_active_indexes_are_rebuilt_on_full_recovery(data) -> None:
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        log = PartitionLog(directory, LogConfig(index_interval_bytes=0), recover_fully=False)
        stored = [append(log, 2, timestamp_ms=ts) for ts in (10, 20)]
        log.roll()
        stored += [append(log, 1, timestamp_ms=ts) for ts in (50, 40, 60)]
        seg = log.segments[-1]
        before = ([seg.offset_index._get(i) for i in range(seg.offset_index.entries)],
                  [seg.time_index._get(i) for i in range(seg.time_index.entries)])
        size = seg.size
        log.close()
        _, index_path, time_path = segment_files(directory, 4)
        index_path.write_bytes(data.draw(garbled_index(struct.Struct(">II"), size)))
        # Time index entries are (i64 timestamp, u32 relative offset).
        time_path.write_bytes(data.draw(garbled_index(struct.Struct(">qI"), size)))
        log = PartitionLog(directory, log.config, recover_fully=True)
        assert log.truncated_bytes == 0
        assert consume_all(log) == b"".join(s.data for s in stored)
        seg = log.segments[-1]
        assert ([seg.offset_index._get(i) for i in range(seg.offset_index.entries)],
                [seg.time_index._get(i) for i in range(seg.time_index.entries)]) == before
        for s in stored:
            assert log.read(s.base_offset, 1 << 20).data[: len(s.data)] == s.data
            assert log.offset_for_timestamp(s.max_timestamp) == (
                next(t.base_offset for t in stored if t.max_timestamp >= s.max_timestamp),
                next(t.max_timestamp for t in stored if t.max_timestamp >= s.max_timestamp))
        log.close()


def test_garbled_index_of_an_old_segment_does_not_lose_data(tmp_path: Path) -> None:
    log, stored = _multi_segment_log(tmp_path)
    log.close()
    index_path = segment_files(tmp_path, 0)[1]
    index_path.write_bytes(struct.pack(">II", 0, 0) + struct.pack(">II", 1, 5)
                           + struct.pack(">II", 2, 100))  # positions inside the file
    log = PartitionLog(tmp_path, log.config, recover_fully=True)
    try:
        assert log.truncated_bytes == 0
        assert consume_all(log) == b"".join(s.data for s in stored)
    finally:
        log.close()


def test_deleted_time_index_of_an_old_segment_keeps_its_max_timestamp(tmp_path: Path) -> None:
    log, _ = _multi_segment_log(tmp_path, timestamps=[5000, 10, 20, 30])
    log.close()
    segment_files(tmp_path, 0)[2].unlink()
    log = PartitionLog(tmp_path, log.config, recover_fully=True)
    try:
        assert log.segments[0].max_timestamp == 5000
        assert log.offset_for_timestamp(4000) == (0, 5000)
    finally:
        log.close()


# --- corrupted baseOffset (outside the CRC) ------------------------------------------------


def _three_batches(directory: Path) -> tuple[list[Stored], Path]:
    log = PartitionLog(directory, LogConfig(), recover_fully=False)
    stored = [append(log, 1, timestamp_ms=1000 + i) for i in range(3)]
    log.close()
    return stored, segment_files(directory, 0)[0]


@pytest.mark.parametrize("byte,value", [(0, 0x80), (3, 0x01)], ids=["negative", "huge"])
def test_recovery_never_raises_on_a_corrupted_base_offset(
    tmp_path: Path, byte: int, value: int
) -> None:
    stored, path = _three_batches(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[len(stored[0].data) * 2 + byte] = value  # in the last batch's baseOffset
    path.write_bytes(raw)
    log = PartitionLog(tmp_path, LogConfig(), recover_fully=True)
    try:
        assert log.log_end_offset == 2  # the damaged batch is dropped
        assert consume_all(log) == stored[0].data + stored[1].data
    finally:
        log.close()


def test_recovery_drops_a_batch_whose_base_offset_goes_backwards(tmp_path: Path) -> None:
    stored, path = _three_batches(tmp_path)
    raw = bytearray(path.read_bytes())
    struct.pack_into(">q", raw, len(stored[0].data) * 2, 0)  # last batch claims offset 0
    path.write_bytes(raw)
    log = PartitionLog(tmp_path, LogConfig(), recover_fully=True)
    try:
        assert log.log_end_offset in (2, 3)  # dropped, or kept with a repaired offset
        assert append(log, 1).base_offset == log.log_end_offset - 1
        offsets = [h.base_offset for h in batches(consume_all(log))]
        assert offsets == sorted(set(offsets))
    finally:
        log.close()


def test_leader_epoch_damage_is_not_detected_and_harmless(tmp_path: Path) -> None:
    """partitionLeaderEpoch is outside the CRC by design (it is assigned on append)."""
    stored, path = _three_batches(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[len(stored[0].data) * 2 + 12] ^= 0x7F
    path.write_bytes(raw)
    log = PartitionLog(tmp_path, LogConfig(), recover_fully=True)
    assert log.log_end_offset == 3
    assert [h.base_offset for h in batches(consume_all(log))] == [0, 1, 2]
    log.close()


# --- producer state is rebuilt from the log -----------------------------------------------


def _idempotent(log: PartitionLog, seq: int, pid: int = 77, epoch: int = 0) -> Stored:
    return append(log, 2, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_producer_state_is_rebuilt_after_a_crash(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, LogConfig(), recover_fully=False)
    first = _idempotent(log, 0)
    append(log, 1)
    second = _idempotent(log, 2)
    log = reopen(log, recover_fully=True)
    for s, seq in ((first, 0), (second, 2)):
        retry = make_batch(2, producer_id=77, producer_epoch=0, base_sequence=seq)
        result = log.append(retry, batches(bytes(retry)))
        assert (result.base_offset, result.last_offset) == (s.base_offset, s.last_offset)
    assert log.log_end_offset == 5
    with pytest.raises(KafkaProtocolError) as info:
        _idempotent(log, 9)
    assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.close()


def test_producer_state_forgets_batches_cut_by_recovery(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, LogConfig(), recover_fully=False)
    _idempotent(log, 0)
    torn = _idempotent(log, 2)
    path = log.segments[-1].path
    log.close()
    os.truncate(path, path.stat().st_size - len(torn.data) // 2)
    log = PartitionLog(tmp_path, LogConfig(), recover_fully=True)
    # The torn batch is gone, so its retry is new data, not a duplicate.
    assert _idempotent(log, 2).base_offset == 2
    log.close()


def test_producer_state_survives_a_roll_and_a_crash(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, LogConfig(), recover_fully=False)
    sent = _idempotent(log, 0)
    log.roll()
    append(log, 1)
    log = reopen(log, recover_fully=True)
    try:
        retry = make_batch(2, producer_id=77, producer_epoch=0, base_sequence=0)
        result = log.append(retry, batches(bytes(retry)))
        assert result.base_offset == sent.base_offset
        assert log.log_end_offset == 3
    finally:
        log.close()


def test_producer_state_survives_a_clean_restart(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, LogConfig(index_interval_bytes=1), recover_fully=False)
    sent = _idempotent(log, 0)
    append(log, 1)
    log.flush()
    log = reopen(log, recover_fully=False)
    try:
        retry = make_batch(2, producer_id=77, producer_epoch=0, base_sequence=0)
        result = log.append(retry, batches(bytes(retry)))
        assert result.base_offset == sent.base_offset
    finally:
        log.close()


# --- a quick deterministic smoke of many random tears --------------------------------------


def test_every_truncation_point_of_a_small_log(tmp_path: Path) -> None:
    built = build_and_crash(tmp_path / "src", [([(b"k", b"v" * i)], i) for i in range(1, 5)],
                            LogConfig(index_interval_bytes=1))
    raw = built.active_path.read_bytes()
    ends = [sum(len(s.data) for s in built.stored[: i + 1]) for i in range(len(built.stored))]
    rng = random.Random(1234)
    for cut in range(len(raw) + 1):
        directory = tmp_path / f"cut-{cut}"
        directory.mkdir()
        (directory / built.active_path.name).write_bytes(raw[:cut] + rng.randbytes(cut % 7))
        log = PartitionLog(directory, built.config, recover_fully=True)
        survivors = [s for s, end in zip(built.stored, ends, strict=True) if end <= cut]
        assert log.log_end_offset == (survivors[-1].last_offset + 1 if survivors else 0)
        assert consume_all(log) == b"".join(s.data for s in survivors)
        log.close()

