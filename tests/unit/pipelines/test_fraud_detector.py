"""The per-card detector's processor, driven with pandas frames as transformWithStateInPandas
hands them, through a stand-in for Spark's state handle: alerts in event-time order per
card, late transactions to the side output with their event as standard JSON, state kept
per card. Spark's own runs are tests/pipelines/test_fraud_pipeline.py."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from headrace.pipelines.fraud.detector import FraudDetector
from headrace.pipelines.fraud.rules import Thresholds
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
