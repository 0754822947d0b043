"""The per-card detector's processor, driven with pandas frames as transformWithStateInPandas
hands them, through a stand-in for Spark's state handle: alerts in event-time order per
card, late transactions to the side output with their event as standard JSON, state kept
per card. Spark's own runs are tests/pipelines/test_fraud_pipeline.py."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.pipelines.fraud.detector import FraudDetector
from headrace.pipelines.fraud.rules import CardState, Thresholds, Txn
from headrace.streaming import buckets
from headrace.streaming.windows import BUCKET
from tests.streaming.stand_ins import Handle, TimerValues

T0 = 1_700_000_000_000


def _txns(rows: list[tuple[str, str, int, float, float | None]]) -> pd.DataFrame:
    """(card, txn id, ms after T0, amount, profile mean) rows, all in Paris."""
    times = np.array([T0 + t for _, _, t, _, _ in rows], dtype="int64")
    return pd.DataFrame({
        "card_id": [r[0] for r in rows], "txn_id": [r[1] for r in rows],
        "user_id": [r[0] for r in rows], "amount": [r[3] for r in rows],
        "lat": 48.8566, "lon": 2.3522, "city": "Paris",
        "event_time": pd.Series(times.astype("datetime64[ms]")).astype("datetime64[ns]"),
        "avg_amount": pd.Series([r[4] for r in rows], dtype="float64"), "std_amount": 5.0,
        "attempt": [1] * len(rows), BUCKET: 0})


def _run(detector: FraudDetector, frame: pd.DataFrame, watermark: int) -> list[dict[str, Any]]:
    out = detector.handleInputRows((0,), iter([frame]), TimerValues(watermark))  # type: ignore[arg-type]
    return [row for f in out for row in f.to_dict("records")]


def test_alerts_and_late_transactions() -> None:
    detector = FraudDetector(Thresholds(), allowed_lateness_ms=0)
    detector.init(Handle())  # type: ignore[arg-type]
    # Card c1: an amount far above its profile raises amount_anomaly; the rows arrive out
    # of order and are evaluated in event-time order.
    out = _run(detector, _txns([("c1", "t2", 2_000, 900.0, 20.0),
                                ("c1", "t1", 1_000, 20.0, 20.0)]), watermark=-1)
    assert [(r["kind"], r["txn_id"], list(r["reasons"])) for r in out] == [
        ("alert", "t2", ["amount_anomaly"])]
    assert out[0]["event_time"] == pd.Timestamp(T0 + 2_000, unit="ms", tz="UTC")
    # Behind the watermark: a late row, its event as standard JSON (null, not NaN, for a
    # missing profile; ints stay ints), and no alert however odd the amount.
    out = _run(detector, _txns([("c2", "t3", 500, 5_000.0, None)]), watermark=T0 + 10_000)
    assert [(r["kind"], r["txn_id"], r["lateness_ms"]) for r in out] == [
        ("late", "t3", 9_500)]
    event = json.loads(out[0]["event"], parse_constant=lambda c: c)
    assert event["avg_amount"] is None and event["attempt"] == 1
    assert event["event_time"].startswith("2023-11-14 22:13:20.500")
    assert BUCKET not in event


class _EveryCardTheLongWay(FraudDetector):
    @property
    def _lone_allowed(self) -> bool:
        return False


_ROW = st.tuples(st.sampled_from(["c1", "c2", "c3", "c4", "c5", "c6"]),
                 st.integers(0, 1_200_000),  # ms after T0: within and past keep_ms
                 st.sampled_from([0.5, 1.0, 20.0, 45.0, 400.0, 5_000.0]),
                 st.sampled_from([None, 20.0, 300.0]),
                 st.sampled_from([(48.8566, 2.3522), (40.7128, -74.006)]))  # lat, lon: not null


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(_ROW, max_size=8), st.integers(-1, 1_200_000)),
                min_size=1, max_size=5), st.sampled_from([0, 60_000]))
def test_a_cards_first_transaction_short_cut_changes_nothing(
        batches: list[tuple[list[Any], int]], lateness: int) -> None:
    """Alerts, late rows and the state kept are the same with the short cut for a card's
    first transaction (``_first``) as when every card goes through ``CardState``."""
    fast = FraudDetector(Thresholds(), allowed_lateness_ms=lateness)
    slow = _EveryCardTheLongWay(Thresholds(), allowed_lateness_ms=lateness)
    for d in (fast, slow):
        d.init(Handle())  # type: ignore[arg-type]
    n = 0
    watermark = -1
    for rows, advance in batches:
        frame = _txns([(card, f"t{n + i}", t, amount, mean)
                       for i, (card, t, amount, mean, _) in enumerate(rows)])
        frame["lat"] = [where[0] for *_, where in rows]
        frame["lon"] = [where[1] for *_, where in rows]
        n += len(rows)
        # the same rows, in the same order per card (cards may come out in any order)
        got = [sorted(_run(d, frame, watermark), key=lambda r: str(r["card_id"]))
               for d in (fast, slow)]
        assert json.dumps(got[0], default=str) == json.dumps(got[1], default=str)
        assert buckets.load(fast.state)[1] == buckets.load(slow.state)[1]
        watermark = max(watermark, T0 + advance)


def test_a_transaction_older_than_the_card_keeps_is_checked_by_its_amount_alone() -> None:
    """Out of order by more than keep_ms behind the card's newest (possible when the
    watermark delay is longer than that): no neighbour is left to compare it with, so only
    the amount rule can fire, and nothing fails."""
    th = Thresholds()
    card = CardState()
    assert card.evaluate(Txn("new", T0 + th.keep_ms + 1, 48.85, 2.35, 10.0, "Paris"),
                         20.0, 5.0, th) == []
    old = Txn("old", T0, 40.71, -74.0, 900.0, "New York")  # far away, and a huge amount
    assert card.evaluate(old, 20.0, 5.0, th) == ["amount_anomaly"]
    assert [t.txn_id for t in card.recent] == ["new"]


def test_a_bucket_written_in_the_older_form_is_read() -> None:
    """A checkpoint from before the flat state form: each card's state was
    ``(CardState as a dict, expiry)``. The card's history still counts."""
    detector = FraudDetector(Thresholds(), allowed_lateness_ms=0)
    detector.init(Handle())  # type: ignore[arg-type]
    older = {"recent": [[f"t{i}", T0 + i * 1_000, 48.8566, 2.3522, 20.0, "Paris"]
                        for i in range(4)], "fired": {}}
    buckets.store(detector.handle, detector.state, None, {"c1": (older, T0 + 903_000)},
                  None, T0 + 903_000)
    # the fifth transaction within five minutes: velocity, from the stored four
    out = _run(detector, _txns([("c1", "t4", 4_000, 20.0, 20.0)]), watermark=-1)
    assert [(r["txn_id"], list(r["reasons"])) for r in out] == [("t4", ["velocity"])]
    stored = buckets.load(detector.state)[1]["c1"]
    assert stored[0] == T0 + 4_000 + Thresholds().keep_ms
    assert len(CardState.from_stored(stored[1:]).recent) == 5
