"""The fraud rules against a plain reference written straight from their definitions
(``rules`` module docstring): the same reasons, in the same order, and the same state after
any sequence of transactions, in or out of order, replayed or not. The rules keep shortcuts
(no re-sort for a transaction in order, no trigonometry for one point); this is what holds
them to the definitions. Also: the detector's stored state, new form and old."""

from __future__ import annotations

from typing import Any

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.pipelines.fraud.geo import haversine_km
from headrace.pipelines.fraud.rules import CardState, Thresholds, Txn, anomalous
from headrace.streaming.timeutil import epoch_ms

T0 = 1_700_000_000_000


def _speed(a: Txn, b: Txn) -> float:
    km = haversine_km(a.lat, a.lon, b.lat, b.lon)
    hours = abs(b.t - a.t) / 3_600_000
    return (float("inf") if km > 0 else 0.0) if hours == 0 else km / hours


class _Reference:
    """Each rule computed from scratch over the whole kept list, on every transaction."""

    def __init__(self) -> None:
        self.recent: list[Txn] = []
        self.fired: dict[str, int] = {}

    def evaluate(self, txn: Txn, mean: float | None, std: float | None,
                 th: Thresholds) -> list[str]:
        if txn.txn_id in {r.txn_id for r in self.recent}:
            return []
        self.recent = sorted([*self.recent, txn], key=lambda r: (r.t, r.txn_id))
        newest = self.recent[-1].t
        self.recent = [r for r in self.recent if r.t >= newest - th.keep_ms]
        kept = txn in self.recent
        velocity = any(
            sum(1 for r in self.recent if s <= r.t < s + th.velocity_window_ms)
            >= th.velocity_count
            for s in range(txn.t - txn.t % th.velocity_hop_ms, txn.t - th.velocity_window_ms,
                           -th.velocity_hop_ms))
        travel = False
        if kept:
            i = self.recent.index(txn)
            travel = any(_speed(*sorted((self.recent[j], txn), key=lambda r: r.t))
                         > th.travel_kmh for j in (i - 1, i + 1) if 0 <= j < len(self.recent))
        tiny = [r for r in self.recent if r.amount < th.tiny_amount
                and abs(r.t - txn.t) <= th.tiny_window_ms]
        testing = txn.amount < th.tiny_amount and any(
            sum(1 for r in tiny if s <= r.t <= s + th.tiny_window_ms) >= th.tiny_count
            for s in (r.t for r in tiny))
        out = []
        for name, hit in (("velocity", velocity), ("impossible_travel", travel),
                          ("amount_anomaly", anomalous(txn.amount, mean, std, th)),
                          ("card_testing", testing)):
            last = self.fired.get(name)
            if hit and (last is None or abs(txn.t - last) >= th.quiet_ms):
                self.fired[name] = txn.t
                out.append(name)
        self.fired = {k: v for k, v in self.fired.items() if v >= newest - th.keep_ms}
        return out


_PLACES = [(48.8566, 2.3522), (48.8570, 2.3500), (40.7128, -74.006)]
_TXN = st.tuples(st.integers(0, 40),  # id: some repeat (replays)
                 st.integers(0, 1_500_000),  # ms after T0: out of order, past keep_ms
                 st.sampled_from([0.5, 1.0, 1.99, 20.0, 400.0, 5_000.0]),
                 st.sampled_from(_PLACES))


@settings(max_examples=300, deadline=None)
@given(st.lists(_TXN, max_size=40), st.sampled_from([None, 20.0]))
def test_rules_match_their_reference(txns: list[tuple[Any, ...]], mean: float | None) -> None:
    th = Thresholds()
    card, reference = CardState(), _Reference()
    for n, t, amount, (lat, lon) in txns:
        txn = Txn(f"t{n}", T0 + t, lat, lon, amount, "x")
        assert card.evaluate(txn, mean, 5.0, th) == reference.evaluate(txn, mean, 5.0, th)
        assert (card.recent, card.fired) == (reference.recent, reference.fired)


def test_stored_state_round_trips_and_reads_the_older_form() -> None:
    card = CardState([Txn("a", T0, 48.85, 2.35, 10.0, "Paris"),
                      Txn("b", T0 + 5, 48.85, 2.35, 1.5, "Paris")], {"velocity": T0})
    assert CardState.from_stored(card.to_stored()) == card
    older = {"recent": [["a", T0, 48.85, 2.35, 10.0, "Paris"],
                        ["b", T0 + 5, 48.85, 2.35, 1.5, "Paris"]], "fired": {"velocity": T0}}
    assert CardState.from_stored(older) == card


def test_event_times_become_epoch_ms_in_any_unit_and_zone() -> None:
    ms = [T0 - 1, T0, T0 + 999]
    naive = pd.Series(pd.to_datetime(ms, unit="ms"))
    for times in (naive, naive.astype("datetime64[us]"), naive.dt.tz_localize("UTC"),
                  naive.dt.tz_localize("UTC").dt.tz_convert("Europe/Paris")):
        assert epoch_ms(times).tolist() == ms
    micros = pd.Series(pd.to_datetime([-1_500, 1_500], unit="us"))  # floored, as numpy does
    assert epoch_ms(micros).tolist() == [-2, 1]
