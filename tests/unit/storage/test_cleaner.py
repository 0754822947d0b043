"""The log cleaner on the storage level: compaction against a dict model, tombstones and
delete horizons, transactions, producer state, and crash safety at every step.

Batches are built with kafka-python's builder (compressed with every codec) and read
back with kafka-python's reader: both independent of the code under test.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from headrace.protocol.records import parse_header, validate_batches
from headrace.storage import cleaner as cleaner_module
from headrace.storage.cleaner import (
    CleanerConfig,
    CleanStats,
    clean,
    cleanable_range,
    load_checkpoint,
    run_step,
    run_to_completion,
)
from headrace.storage.config import LogConfig
from headrace.storage.log import PartitionLog
from tests.unit.storage.support import reopen

KEYS = [b"k%d" % i for i in range(6)]
CONFIG = CleanerConfig(dedupe_buffer_size=1 << 30)


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]


def compact_log(path: Path, **kw: object) -> PartitionLog:
    cfg: dict[str, object] = {"cleanup_policy": "compact", "segment_bytes": 400,
                              "min_cleanable_dirty_ratio": 0.0, "delete_retention_ms": 1000,
                              "retention_ms": -1}
    cfg.update(kw)
    return PartitionLog(path, LogConfig(**cfg), recover_fully=False)  # type: ignore[arg-type]


def append(log: PartitionLog, records: list[tuple[bytes | None, bytes | None]], codec: int = 0,
           ts: int = 1000, producer: tuple[int, int, int] | None = None,
           transactional: bool = False) -> list[Rec]:
    """Append one batch; returns its records as stored (offsets assigned)."""
    pid, epoch, seq = producer or (-1, -1, -1)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 20)
    for i, (k, v) in enumerate(records):
        b.append(i, ts + i, k, v, [("h", b"%d" % i)])
    data = bytearray(b.build())
    result = log.append(data, validate_batches(data))
    return [Rec(result.base_offset + i, k, v, ts + i, (("h", b"%d" % i),))
            for i, (k, v) in enumerate(records)]


def consume_all(log: PartitionLog) -> bytes:
    """Every batch from the log start, read as a consumer does (next offset after each
    batch); after cleaning the log may end in a gap below the log end offset."""
    offset = log.log_start_offset
    out = bytearray()
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).data
        if not data:
            break
        pos = 0
        while pos < len(data):
            h = parse_header(data, pos)
            pos += h.size
            offset = h.last_offset + 1
        out += data
    return bytes(out)


def read_back(log: PartitionLog) -> list[Rec]:
    out = []
    data = consume_all(log)
    pos = 0
    while pos < len(data):
        h = parse_header(data, pos)
        for r in DefaultRecordBatch(data[pos : pos + h.size]):
            if not h.is_control:
                out.append(Rec(r.offset, r.key, r.value, r.timestamp, tuple(r.headers)))
        pos += h.size
    return out


def fold(records: list[Rec]) -> dict[bytes, bytes]:
    latest: dict[bytes, bytes | None] = {}
    for r in records:
        if r.key is not None:
            latest[r.key] = r.value
    return {k: v for k, v in latest.items() if v is not None}


def run_pass(log: PartitionLog, now_ms: int, config: CleanerConfig = CONFIG) -> CleanStats | None:
    rng = cleanable_range(log, now_ms)
    if rng is None:
        return None
    return run_to_completion(clean(rng, now_ms, config))


def check_invariants(log: PartitionLog, written: list[Rec]) -> list[Rec]:
    """Every surviving record is the original at its offset, offsets strictly increase,
    and the latest value per key is the model's."""
    got = read_back(log)
    by_offset = {r.offset: r for r in written}
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets))
    for r in got:
        assert r == by_offset[r.offset]
    assert fold(got) == fold(written)
    leftovers = [p.name for p in log.directory.iterdir()
                 if p.name.endswith((".cleaned", ".swap", ".swap.tmp"))]
    assert leftovers == []
    return got


# --- the model property ----------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"),
                  st.lists(st.tuples(st.sampled_from(KEYS), st.none() | st.binary(max_size=12)),
                           min_size=1, max_size=6),
                  st.integers(0, 4)),
        st.tuples(st.just("roll"), st.just([]), st.just(0)),
        st.tuples(st.just("clean"), st.just([]), st.integers(0, 1500)),
    ),
    min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.sampled_from([1 << 30, 300]))
def test_cleaning_matches_a_dict_model(ops: list[tuple[str, list, int]], capacity: int) -> None:
    config = CleanerConfig(dedupe_buffer_size=capacity, chunk_bytes=200)
    with tempfile.TemporaryDirectory() as d:
        log = compact_log(Path(d))
        written: list[Rec] = []
        now = 10_000
        for op, records, arg in ops:
            if op == "append":
                written += append(log, records, codec=arg, ts=now)
            elif op == "roll":
                log.roll()
            else:
                now += arg
                stats = run_pass(log, now, config)
                got = check_invariants(log, written)
                if stats is not None and capacity > 1 << 20:
                    cleaned = [r.key for r in got if r.offset < stats.end_offset]
                    assert len(cleaned) == len(set(cleaned))  # one record per key
        # Everything cleanable, then past every delete horizon: no tombstone is left.
        log.roll()
        for _ in range(100):
            now += 5000
            if run_pass(log, now, config) is None:
                break
        got = check_invariants(log, written)
        assert all(r.value is not None for r in got)
        assert len(got) == len(fold(written))
        log = reopen(log, recover_fully=True)
        assert check_invariants(log, written) == got
        log.close()


# --- behaviour in detail ---------------------------------------------------------------


def test_keeps_offsets_timestamps_headers_and_codec(tmp_path: Path) -> None:
    log = compact_log(tmp_path / "t-0")
    log = compact_log(tmp_path / "t-0", segment_bytes=10_000)
    big = b"x" * 200  # compressible: kafka-python sends a batch uncompressed otherwise
    written = append(log, [(b"a", big), (b"b", big), (b"a", big + b"2")], codec=4, ts=5000)
    written += append(log, [(b"b", big + b"2"), (b"c", big)], codec=2, ts=6000)
    assert parse_header(consume_all(log)).compression == 4
    log.roll()
    stats = run_pass(log, 10_000)
    assert stats is not None and stats.records_kept == 3
    got = check_invariants(log, written)
    assert [(r.offset, r.key) for r in got] == [(2, b"a"), (3, b"b"), (4, b"c")]
    data = consume_all(log)
    first = parse_header(data)
    # The first batch keeps its base offset, last offset delta and codec; gaps are allowed.
    assert (first.base_offset, first.last_offset_delta, first.record_count) == (0, 2, 1)
    assert first.compression == 4 and first.max_timestamp == 5002
    log.close()


def test_nothing_to_clean_without_a_closed_dirty_segment(tmp_path: Path) -> None:
    log = compact_log(tmp_path / "t-0")
    append(log, [(b"a", b"1"), (b"a", b"2")])
    assert cleanable_range(log, 10**12) is None  # only the active segment
    log.roll()
    assert cleanable_range(log, 10**12) is not None
    delete_only = compact_log(tmp_path / "t-1", cleanup_policy="delete")
    append(delete_only, [(b"a", b"1")])
    delete_only.roll()
    assert cleanable_range(delete_only, 10**12) is None
    log.close()
    delete_only.close()


def test_dirty_ratio_and_min_compaction_lag(tmp_path: Path) -> None:
    log = compact_log(tmp_path / "t-0", min_cleanable_dirty_ratio=0.6)
    for i in range(4):
        append(log, [(b"k%d" % i, b"v")], ts=1000)
        log.roll()
    rng = cleanable_range(log, 2000)
    assert rng is not None and rng.dirty_ratio == 1.0
    run_pass(log, 2000)
    assert load_checkpoint(log).first_dirty_offset == 4
    append(log, [(b"k9", b"v")], ts=1000)
    log.roll()
    assert cleanable_range(log, 2000) is None  # 1 dirty segment of 5: ratio 0.2
    lagged = compact_log(tmp_path / "t-1", min_compaction_lag_ms=5000)
    append(lagged, [(b"a", b"1")], ts=1000)
    lagged.roll()
    assert cleanable_range(lagged, 5500) is None  # its record is younger than the lag
    assert cleanable_range(lagged, 6001) is not None
    log.close()
    lagged.close()


def test_max_compaction_lag_forces_a_pass_below_the_ratio(tmp_path: Path) -> None:
    log = compact_log(tmp_path / "t-0", min_cleanable_dirty_ratio=0.9,
                      max_compaction_lag_ms=10_000)
    for i in range(4):
        append(log, [(b"k%d" % i, b"v")], ts=1000)
        log.roll()
    run_pass(log, 2000)
    append(log, [(b"k0", b"w")], ts=5000)
    log.roll()
    assert cleanable_range(log, 14_000) is None  # 1 dirty segment of 5, not old enough
    rng = cleanable_range(log, 15_001)
    assert rng is not None and rng.reason == "max.compaction.lag.ms"
    log.close()


def test_tombstone_survives_until_its_delete_horizon(tmp_path: Path) -> None:
    log = compact_log(tmp_path / "t-0", delete_retention_ms=1000)
    written = append(log, [(b"a", b"1"), (b"b", b"1")])
    written += append(log, [(b"a", None)])
    log.roll()
    run_pass(log, 10_000)  # stamps the horizon 11_000 on the tombstone's batch
    assert [(r.key, r.value) for r in check_invariants(log, written)] == [(b"b", b"1"), (b"a", None)]
    assert load_checkpoint(log).next_horizon_ms == 11_000
    rng = cleanable_range(log, 10_500)
    assert rng is None
    rng = cleanable_range(log, 11_000)
    assert rng is not None and rng.reason == "delete horizon"
    run_to_completion(clean(rng, 11_000, CONFIG))
    assert [(r.key, r.value) for r in check_invariants(log, written)] == [(b"b", b"1")]
    assert load_checkpoint(log).next_horizon_ms == -1
    log.close()


def test_empty_groups_merge_and_null_keys_are_dropped(tmp_path: Path) -> None:
    log = compact_log(tmp_path / "t-0", segment_bytes=150)
    written = []
    for i in range(6):
        written += append(log, [(b"same", b"%d" % i), (None, b"no key")])
    log.roll()
    before = len(log.segments)
    stats = run_pass(log, 10**6)
    assert stats is not None and stats.segments_out == stats.segments_in == before - 1
    # Grouping goes by the sizes before cleaning: the emptied segments merge next time.
    append(log, [(b"other", b"1")])
    log.roll()
    stats = run_pass(log, 10**6)
    assert stats is not None and stats.segments_out < stats.segments_in
    assert len(log.segments) < before
    got = read_back(log)
    assert [(r.key, r.value) for r in got] == [(b"same", b"5"), (b"other", b"1")]
    log.close()


def test_reader_of_an_old_region_still_reads_after_the_swap(tmp_path: Path) -> None:
    log = compact_log(tmp_path / "t-0")
    append(log, [(b"a", b"1"), (b"a", b"2")])
    log.roll()
    append(log, [(b"x", b"1")])
    region = log.read_region(0, 1 << 20).region
    assert region is not None
    old_bytes = region.read()
    run_pass(log, 10**6)
    assert region.read() == old_bytes  # the old file is unlinked but still open
    region.close()
    assert consume_all(log) != old_bytes
    log.close()


def test_producer_keeps_its_last_batch_so_sequences_still_check(tmp_path: Path) -> None:
    log = compact_log(tmp_path / "t-0")
    append(log, [(b"a", b"1"), (b"a", b"2")], producer=(7, 0, 0))
    append(log, [(b"a", b"3")], producer=(8, 0, 0))  # supersedes all of producer 7's records
    log.roll()
    run_pass(log, 10**6)
    data = consume_all(log)
    first = parse_header(data)
    assert (first.producer_id, first.record_count, first.base_sequence,
            first.last_offset_delta) == (7, 0, 0, 1)  # emptied, sequence range intact
    log = reopen(log, recover_fully=True)
    for path in log.directory.glob("*.snapshot"):
        path.unlink()
    log = reopen(log, recover_fully=True)  # rebuilt from the log alone
    assert log.producer_state.producers[7].last_seq == 1
    # The retried batch is still recognised as a duplicate; the next sequence is accepted.
    dup = append(log, [(b"a", b"1"), (b"a", b"2")], producer=(7, 0, 0))
    assert dup[0].offset == 0
    nxt = append(log, [(b"b", b"1")], producer=(7, 0, 2))
    assert nxt[0].offset == log.log_end_offset - 1
    log.close()


def test_aborted_transactions_and_markers(tmp_path: Path) -> None:
    log = compact_log(tmp_path / "t-0", delete_retention_ms=100)
    written = append(log, [(b"a", b"committed")], producer=(1, 0, 0), transactional=True)
    log.append_control(1, 0, committed=True)
    aborted = append(log, [(b"a", b"aborted"), (b"b", b"aborted")], producer=(2, 0, 0),
                     transactional=True)
    log.append_control(2, 0, committed=False)
    written += append(log, [(b"c", b"plain")])
    log.roll()
    assert len(log.producer_state.aborted) == 1
    run_pass(log, 10_000)
    got = read_back(log)
    assert [(r.key, r.value) for r in got] == [(b"a", b"committed"), (b"c", b"plain")]
    assert not set(aborted) & set(got)
    # Producer 2's aborted batch is its last one: kept, emptied, so the ABORT marker stays
    # too (a batch of its transaction is still there), as in Kafka.
    assert controls(log) == [(1, 1), (2, 1)]
    assert transactional_batches(log) == [(1, 1), (2, 0)]
    # Once the producers expire, the empty batch goes; then the marker, after its horizon.
    assert log.expire_producers(10**14) == 2
    for now in (20_000, 30_000):
        append(log, [(b"d", b"%d" % now)])
        log.roll()
        run_pass(log, now)
    assert transactional_batches(log) == [(1, 1)]
    assert controls(log) == [(1, 1), (2, 1)]  # horizon stamped, not yet passed
    stats = run_pass(log, 30_200)
    assert stats is not None and stats.markers_dropped == 1
    assert controls(log) == [(1, 1)]  # the COMMIT stays while its data does
    assert log.producer_state.aborted == []
    log.close()


def batches_of(log: PartitionLog) -> list[tuple[bool, bool, int, int]]:
    out = []
    data = consume_all(log)
    pos = 0
    while pos < len(data):
        h = parse_header(data, pos)
        out.append((h.is_control, h.is_transactional, h.producer_id, h.record_count))
        pos += h.size
    return out


def controls(log: PartitionLog) -> list[tuple[int, int]]:
    return [(pid, n) for control, _, pid, n in batches_of(log) if control]


def transactional_batches(log: PartitionLog) -> list[tuple[int, int]]:
    return [(pid, n) for control, txn, pid, n in batches_of(log) if txn and not control]


def test_log_start_offset_and_retention_with_compact_delete(tmp_path: Path) -> None:
    log = compact_log(tmp_path / "t-0", cleanup_policy="compact,delete", retention_ms=1000)
    append(log, [(b"a", b"1")], ts=0)
    log.roll()
    append(log, [(b"a", b"2")], ts=5000)
    log.roll()
    assert log.enforce_retention(now_ms=5500) == 1
    written = append(log, [(b"b", b"1")], ts=5000)
    assert log.delete_records(2) == 2
    run_pass(log, 6000)
    assert [r.key for r in read_back(log)] == [b"b"]
    assert written[0].offset == 2
    log.close()


# --- crash safety -------------------------------------------------------------------------


class SimulatedCrash(BaseException):
    pass


@pytest.mark.parametrize("point", ["before-commit", "after-commit", "after-swap"])
@pytest.mark.parametrize("group", [0, 1])
def test_crash_at_each_swap_point_loses_nothing(tmp_path: Path, point: str, group: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log = compact_log(tmp_path / "t-0", segment_bytes=300)
    written = []
    for i in range(30):
        written += append(log, [(KEYS[i % 4], b"v%d" % i), (KEYS[(i + 1) % 6], None)])
    log.roll()
    reached = []

    def crash(name: str) -> None:
        if name == point:
            reached.append(name)
            if len(reached) > group:
                raise SimulatedCrash(name)

    monkeypatch.setattr(cleaner_module, "_crash_point", crash)
    rng = cleanable_range(log, 10**6)
    assert rng is not None
    with pytest.raises(SimulatedCrash):
        run_to_completion(clean(rng, 10**6, CONFIG))
    monkeypatch.undo()
    # The process "dies" here: reopen from disk without the old log's help.
    log = PartitionLog(log.directory, log.config, recover_fully=True)
    assert log.swaps_completed == (0 if point == "before-commit" else 1)
    check_invariants(log, written)
    run_pass(log, 10**6)
    check_invariants(log, written)
    log.close()


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 300), st.lists(st.tuples(st.integers(0, 7), st.booleans()),
                                      min_size=5, max_size=60))
def test_abandoned_pass_at_any_step_recovers(stop_after: int,
                                            updates: list[tuple[int, bool]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = compact_log(Path(d) / "t-0", segment_bytes=200)
        written = []
        for k, tomb in updates:
            written += append(log, [(b"k%d" % k, None if tomb else b"v%d" % len(written))])
        log.roll()
        rng = cleanable_range(log, 10**6)
        assert rng is not None
        pass_ = clean(rng, 10**6, CleanerConfig(dedupe_buffer_size=1 << 30, chunk_bytes=1))
        result: object = None
        try:
            for _ in range(stop_after):
                result = run_step(pass_.send(result))
        except StopIteration:
            pass
        # Abandon the pass mid-way (its uncommitted files stay, as after a crash).
        log = PartitionLog(log.directory, log.config, recover_fully=True)
        check_invariants(log, written)
        pass_.close()
        log.close()
