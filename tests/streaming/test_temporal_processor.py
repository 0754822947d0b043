"""``temporal_join``'s columnar processor, driven in process with pandas frames as
transformWithStateInPandas hands them (``stand_ins``), against a reference written per key
from the join's definition: the version valid at an event's time, events held until the
watermark passes them, a key's versions evicted when one of its timers fires (all at or
before the watermark but the newest), late events joined at once. Spark's own runs are
``test_joins.py``."""

from __future__ import annotations

import pickle
from typing import Any

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.streaming import joins
from tests.streaming.stand_ins import Handle, TimerValues

Row = tuple[str, str, int, str]  # side ("L" event, "R" table row), key, time, text


class Reference:
    """A key's state as a per-key processor holds it (the form buckets had before the
    columnar processor): versions, held events, the first valid_from, timers."""

    def __init__(self) -> None:
        self.keys: dict[str, dict[str, Any]] = {}

    def batch(self, rows: list[Row], watermark: int) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        by_key: dict[str, tuple[list[tuple[int, str]], list[tuple[int, str]]]] = {}
        for side, key, t, text in rows:
            by_key.setdefault(key, ([], []))[side == "L"].append((t, text))
        for key, (tables, events) in by_key.items():
            ks = self.keys.setdefault(key, {"first": None, "versions": {}, "pending": {},
                                            "timers": set()})
            tables.sort(key=lambda r: r[0])
            events.sort(key=lambda r: r[0])
            for t, row in tables:
                ks["versions"][t] = row
            if tables:
                first = ks["first"]
                ks["first"] = tables[0][0] if first is None else min(first, tables[0][0])
                ks["timers"].add(tables[-1][0])
            for t, event in events:
                if watermark >= 0 and t <= watermark:
                    out.append(self.joined(ks, event, t, True))
                else:
                    ks["pending"].setdefault(t, []).append(event)
                    ks["timers"].add(t)
        return out + self.fire(watermark)

    def fire(self, watermark: int) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for key, ks in list(self.keys.items()):
            if any(t <= watermark for t in ks["timers"]):
                ks["timers"] = {t for t in ks["timers"] if t > watermark}
                for t in sorted(ks["pending"]):
                    if t <= watermark:
                        out += [self.joined(ks, e, t, False) for e in ks["pending"].pop(t)]
                older = sorted(v for v in ks["versions"] if v <= watermark)
                for since in older[:-1]:
                    del ks["versions"][since]
            if not (ks["versions"] or ks["pending"] or ks["timers"]):
                del self.keys[key]
        return out

    @staticmethod
    def joined(ks: dict[str, Any], event: str, t: int, late: bool) -> tuple[Any, ...]:
        held = ks["versions"]
        valid = [v for v in held if v <= t]
        if valid:
            since = max(valid)
        elif late and held and ks["first"] is not None and ks["first"] <= t:
            since = min(held)
        else:
            return event, None, None, late
        return event, held[since], since, late


def _frame(rows: list[Row]) -> pd.DataFrame:
    return pd.DataFrame({
        joins._KEY: [r[1] for r in rows], joins._T: pd.Series([r[2] for r in rows], dtype="int64"),
        joins._SIDE: [r[0] for r in rows],
        joins._LEFT: [r[3] if r[0] == "L" else None for r in rows],
        joins._RIGHT: [r[3] if r[0] == "R" else None for r in rows],
        joins._PK: None, joins._LEFT_OP: None})


def _rows(frames: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for f in frames for r in f[
        [joins._LEFT, joins._RIGHT, joins._VALID_FROM, "late"]].itertuples(index=False))


batches_st = st.lists(st.tuples(
    st.lists(st.tuples(st.sampled_from("LR"), st.sampled_from(["a", "b", "c", "d"]),
                       st.integers(0, 40)), max_size=12),
    st.integers(0, 12),  # how far the watermark moves after the batch
), min_size=1, max_size=10)


@settings(max_examples=300, deadline=None)
@given(batches_st, st.integers(-1, 10), st.integers(0, 10))
def test_the_columnar_processor_joins_as_state_per_key_does(
        batches: list[tuple[list[tuple[str, str, int]], int]], start: int,
        per_key_until: int) -> None:
    """Batch for batch the same rows; a batch without rows is the bucket's timer firing
    (when it is due). Until batch ``per_key_until`` the bucket is stored per key, as
    before the columnar processor, and read from there."""
    reference, handle = Reference(), Handle()
    processor = joins._TemporalProcessor()
    processor.init(handle)  # type: ignore[arg-type]
    watermark, n = start, 0
    for i, (spec, advance) in enumerate(batches):
        rows = []
        for side, key, t in spec:
            rows.append((side, f'{{"k":"{key}"}}', t, f"{side}{n}"))
            n += 1
        if i < per_key_until:  # the bucket as it was written before
            timer = min((t for ks in reference.keys.values() for t in ks["timers"]),
                        default=None)
            processor.bucket.update((pickle.dumps((reference.keys, timer)),)
                                    if reference.keys else None)
            handle.timers = set() if timer is None else {timer}
        if rows:
            got = processor.handleInputRows((0,), iter([_frame(rows)]),
                                            TimerValues(watermark))  # type: ignore[arg-type]
            expected = reference.batch(rows, watermark)
        elif any(t <= watermark for t in handle.timers):
            handle.timers = {t for t in handle.timers if t > watermark}  # Spark drops it
            got = processor.handleExpiredTimer((0,), TimerValues(watermark),  # type: ignore[arg-type]
                                               None)  # type: ignore[arg-type]
            expected = reference.fire(watermark)
        else:
            continue
        assert _rows(got) == sorted(expected), i
        # One timer, the earliest time at which a key has work; none for an empty bucket.
        wanted = min((t for ks in reference.keys.values() for t in ks["timers"]),
                     default=None)
        assert handle.timers == (set() if wanted is None else {wanted})
        assert (processor.bucket.get() is None) == (not reference.keys)
        watermark += advance
