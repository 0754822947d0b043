"""The fraud rules, as plain Python over one card's recent transactions (no Spark here).

``CardState.evaluate(txn, profile)`` adds a transaction to the card's state and returns the
reasons it is suspicious. The thresholds sit between what normal traffic does and what
injected fraud does (``config.py`` states the generator's side of that contract):

- velocity: at least 5 transactions in a 5-minute hopping window (1-minute hop);
- impossible travel: faster than 1000 km/h between the transaction and its neighbour in
  event time (either side: events may arrive out of order);
- amount anomaly: above both the user's mean + 6 standard deviations and 5x the mean;
- card testing: at least 5 charges under 2.00 within 5 minutes.

A rule that fired for a card stays quiet for that card for 10 minutes of event time, so a
burst gives one alert, not one per transaction. The state keeps 15 minutes of event time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Any, NamedTuple

from headrace.pipelines.fraud.geo import speed_kmh


@dataclass(frozen=True)
class Thresholds:
    velocity_window_ms: int = 300_000
    velocity_hop_ms: int = 60_000
    velocity_count: int = 5
    travel_kmh: float = 1000.0
    amount_sigmas: float = 6.0
    amount_factor: float = 5.0
    tiny_amount: float = 2.0
    tiny_count: int = 5
    tiny_window_ms: int = 300_000
    quiet_ms: int = 600_000
    keep_ms: int = 900_000


WEIGHTS = {"velocity": 0.7, "impossible_travel": 0.9, "amount_anomaly": 0.6,
           "card_testing": 0.8}


class Txn(NamedTuple):
    txn_id: str
    t: int
    lat: float
    lon: float
    amount: float
    city: str


# A card's state as the detector stores it, flat (few objects to pickle): when each rule
# last fired (None for none), then the fields of each recent ``Txn``, oldest first.
StoredCard = tuple[Any, ...]
_TXN_FIELDS = len(Txn._fields)


@dataclass
class CardState:
    """One card's recent transactions (sorted by event time) and when each rule last fired."""

    recent: list[Txn] = field(default_factory=list)
    fired: dict[str, int] = field(default_factory=dict)

    def to_stored(self) -> StoredCard:
        return (self.fired or None, *chain.from_iterable(self.recent))

    @classmethod
    def from_stored(cls, stored: StoredCard | dict[str, Any]) -> CardState:
        """The state ``to_stored`` made, or the older form, a dict of lists
        (``{"recent": [[txn_id, t, lat, lon, amount, city], ...], "fired": {...}}``)."""
        if isinstance(stored, dict):
            return cls([Txn(str(v[0]), int(v[1]), float(v[2]), float(v[3]), float(v[4]),
                            str(v[5])) for v in stored["recent"]], dict(stored["fired"]))
        return cls([Txn._make(stored[i:i + _TXN_FIELDS])
                    for i in range(1, len(stored), _TXN_FIELDS)], dict(stored[0] or {}))

    def evaluate(self, txn: Txn, mean: float | None, std: float | None,
                 th: Thresholds = Thresholds()) -> list[str]:
        """Add ``txn``; return the reasons (rule names) it raises, quiet periods applied."""
        recent = self.recent
        for r in recent:
            if r.txn_id == txn.txn_id:
                return []  # a transaction seen before (replayed input) raises nothing new
        last = recent[-1] if recent else None
        recent.append(txn)
        if last is not None and (txn.t, txn.txn_id) < (last.t, last.txn_id):
            recent.sort(key=_by_time)  # out of order: a transaction older than the newest
        horizon = recent[-1].t - th.keep_ms
        if recent[0].t < horizon:
            self.recent = [r for r in recent if r.t >= horizon]
        reasons = [name for name, hit in (
            ("velocity", self._velocity(txn, th)),
            ("impossible_travel", self._travel(txn, th)),
            ("amount_anomaly", anomalous(txn.amount, mean, std, th)),
            ("card_testing", self._testing(txn, th)),
        ) if hit]
        out = []
        for name in reasons:
            fired = self.fired.get(name)
            if fired is not None and abs(txn.t - fired) < th.quiet_ms:
                continue
            self.fired[name] = txn.t
            out.append(name)
        if self.fired and min(self.fired.values()) < horizon:
            self.fired = {k: v for k, v in self.fired.items() if v >= horizon}
        return out

    def _velocity(self, txn: Txn, th: Thresholds) -> bool:
        if len(self.recent) < th.velocity_count:
            return False  # no window can hold more transactions than the card has
        first = txn.t - txn.t % th.velocity_hop_ms
        for start in range(first, txn.t - th.velocity_window_ms, -th.velocity_hop_ms):
            n = sum(1 for r in self.recent if start <= r.t < start + th.velocity_window_ms)
            if n >= th.velocity_count:
                return True
        return False

    def _travel(self, txn: Txn, th: Thresholds) -> bool:
        try:
            i = self.recent.index(txn)
        except ValueError:
            return False  # older than what the card keeps behind its newest: no neighbour
        for j in (i - 1, i + 1):
            if 0 <= j < len(self.recent):
                r = self.recent[j]
                a, b = (r, txn) if r.t <= txn.t else (txn, r)
                if speed_kmh(a.lat, a.lon, a.t, b.lat, b.lon, b.t) > th.travel_kmh:
                    return True
        return False

    def _testing(self, txn: Txn, th: Thresholds) -> bool:
        if txn.amount >= th.tiny_amount:
            return False
        tiny = [r for r in self.recent if r.amount < th.tiny_amount
                and abs(r.t - txn.t) <= th.tiny_window_ms]
        return any(sum(1 for r in tiny if s <= r.t <= s + th.tiny_window_ms) >= th.tiny_count
                   for s in (r.t for r in tiny))


def _by_time(txn: Txn) -> tuple[int, str]:
    return txn.t, txn.txn_id


def anomalous(amount: float, mean: float | None, std: float | None, th: Thresholds) -> bool:
    if mean is None or std is None:
        return False
    return amount > mean + th.amount_sigmas * std and amount > th.amount_factor * mean


def score(reasons: list[str]) -> float:
    """1 - prod(1 - weight): two independent signals score higher than either alone."""
    miss = 1.0
    for r in reasons:
        miss *= 1.0 - WEIGHTS[r]
    return round(1.0 - miss, 4)
