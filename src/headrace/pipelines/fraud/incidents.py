"""Planning of the injected fraud incidents (see ``config.py`` for the guarantees).

Incidents are planned before the run, as offsets from its start, each on a distinct card:
the card leaves normal traffic ``guard_ms`` before its first incident transaction and never
comes back (the bank blocked it). Velocity bursts and amount anomalies happen where the
user is; card testing at a digital merchant there; impossible travel goes from there to a
city at least 1500 km away, fast enough to imply at least 2000 km/h.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random

from headrace.pipelines.fraud.config import (
    ANOMALY_FACTOR,
    CARD_TESTING_SPAN_MS,
    CARD_TESTING_TXNS,
    SPAN_SHARE_OF_RUN,
    TRAVEL_MAX_GAP_MS,
    TRAVEL_MIN_KM,
    TRAVEL_MIN_KMH,
    VELOCITY_SPAN_MS,
    VELOCITY_TXNS,
    FraudConfig,
)
from headrace.pipelines.fraud.geo import CITIES, haversine_km
from headrace.pipelines.fraud.truth import Pattern
from headrace.pipelines.fraud.world import Merchant, User, World, count_for

TESTING_AMOUNTS = (0.01, 0.05, 0.10, 0.50, 1.00, 1.00, 1.23, 1.50, 1.99)


@dataclass(frozen=True, slots=True)
class PlannedTxn:
    offset_ms: int
    merchant: Merchant
    amount: float


@dataclass(frozen=True, slots=True)
class PlannedIncident:
    pattern: Pattern
    card: int
    txns: tuple[PlannedTxn, ...]

    @property
    def first_offset_ms(self) -> int:
        return min(t.offset_ms for t in self.txns)


def plan_incidents(config: FraudConfig, world: World, rng: Random) -> list[PlannedIncident]:
    """All incidents of the run, sorted by first offset. Deterministic for ``rng``'s state."""
    minutes = config.duration_s / 60
    counts: list[tuple[Pattern, int]] = [
        ("velocity", count_for(config.velocity_bursts * minutes, rng)),
        ("impossible_travel", count_for(config.impossible_travel * minutes, rng)),
        ("amount_anomaly", count_for(config.amount_anomalies * minutes, rng)),
        ("card_testing", count_for(config.card_testing * minutes, rng)),
    ]
    total = sum(n for _, n in counts)
    cards = rng.sample(range(len(world.cards)), min(total, len(world.cards)))
    duration = config.duration_ms
    out: list[PlannedIncident] = []
    for pattern, n in counts:
        for _ in range(n):
            if not cards:
                break
            card = cards.pop()
            user = world.users[world.cards[card][1]]
            txns = _PLANNERS[pattern](world, user, duration, rng)
            out.append(PlannedIncident(pattern, card, txns))
    out.sort(key=lambda p: (p.first_offset_ms, p.card))
    return out


def _span(bounds: tuple[int, int], duration: int, rng: Random) -> int:
    return min(rng.randint(*bounds), int(duration * SPAN_SHARE_OF_RUN))


def _burst_offsets(k: int, span: int, duration: int, rng: Random) -> list[int]:
    first = rng.randrange(max(1, duration - span))
    inner = sorted(rng.randint(0, span) for _ in range(k - 2))
    return [first + d for d in (0, *inner, span)]


def _velocity(world: World, user: User, duration: int, rng: Random) -> tuple[PlannedTxn, ...]:
    k = rng.randint(*VELOCITY_TXNS)
    offsets = _burst_offsets(k, _span(VELOCITY_SPAN_MS, duration, rng), duration, rng)
    here = world.by_city[user.location]
    return tuple(PlannedTxn(t, rng.choice(here), user.normal_amount(rng)) for t in offsets)


def _card_testing(world: World, user: User, duration: int,
                  rng: Random) -> tuple[PlannedTxn, ...]:
    k = rng.randint(*CARD_TESTING_TXNS)
    offsets = _burst_offsets(k, _span(CARD_TESTING_SPAN_MS, duration, rng), duration, rng)
    digital = world.digital_by_city[user.location]
    return tuple(PlannedTxn(t, rng.choice(digital), rng.choice(TESTING_AMOUNTS))
                 for t in offsets)


def _amount_anomaly(world: World, user: User, duration: int,
                    rng: Random) -> tuple[PlannedTxn, ...]:
    merchant = rng.choice(world.high_value_by_city[user.location])
    amount = round(user.anomaly_floor * rng.uniform(*ANOMALY_FACTOR), 2)
    return (PlannedTxn(rng.randrange(duration), merchant, amount),)


def _impossible_travel(world: World, user: User, duration: int,
                       rng: Random) -> tuple[PlannedTxn, ...]:
    here = CITIES[user.location]
    far = [i for i, c in enumerate(CITIES)
           if haversine_km(here.lat, here.lon, c.lat, c.lon) >= TRAVEL_MIN_KM]
    there = rng.choice(far)
    km = haversine_km(here.lat, here.lon, CITIES[there].lat, CITIES[there].lon)
    # The slack of 10 km covers merchants' offsets from their city centres.
    fastest_gap = int((km - 10) / TRAVEL_MIN_KMH * 3_600_000)
    hi = max(1, min(TRAVEL_MAX_GAP_MS, fastest_gap, int(duration * SPAN_SHARE_OF_RUN)))
    gap = rng.randint(min(30_000, max(1, hi // 2)), hi)
    first = rng.randrange(max(1, duration - gap))
    return (PlannedTxn(first, rng.choice(world.by_city[user.location]), user.normal_amount(rng)),
            PlannedTxn(first + gap, rng.choice(world.by_city[there]), user.normal_amount(rng)))


_PLANNERS = {"velocity": _velocity, "card_testing": _card_testing,
             "amount_anomaly": _amount_anomaly, "impossible_travel": _impossible_travel}
