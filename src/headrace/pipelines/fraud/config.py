"""Configuration of the card-fraud generator, and the guarantees it keeps.

The constants below are **contracts** a detector may rely on: normal traffic stays on one
side of each line, injected fraud on the other, so a detector with thresholds in between can
reach precision and recall of 1.

Normal (non-incident) traffic, per card:

- consecutive transactions are at least ``NORMAL_MIN_GAP_MS`` (80 s) apart in event time,
  so a card makes at most 2 transactions in any 2 minutes, 3 in any 3, 4 in any 5;
- every transaction is in one city (where the user is: home, or the city a *traveller* is
  visiting) at a merchant within ``MERCHANT_JITTER_DEG`` of its centre: two transactions
  of a card are at most ~6.3 km apart and 80 s apart, so under 300 km/h (< 900 km/h);
- amounts are below ``mean + 5 stdev`` of *every* version of the user's profile (and so
  below 4.75 x mean), and at least 2.00, except rare tiny charges (< 2.00): at most one
  per card in any ``NORMAL_TINY_SPACING_MS`` (10 min).

Injected incidents (see ``incidents.py``): velocity = 6-10 transactions within 150 s;
impossible travel = two transactions >= 1500 km apart at >= 2000 km/h; amount anomaly =
one amount >= 1.5 x max(mean + 8 stdev, 5 x mean) over the user's profile versions; card
testing = 5-12 charges < 2.00 within 180 s. In runs shorter than those spans, spans shrink
to 80 % of the run. An incident card makes no normal transaction from ``guard_ms`` before
its first incident transaction on (the card is blocked afterwards), so late or reordered
normal traffic never interleaves with an incident.

Network: on-time records arrive after a lognormal delay (median ``delay_median_ms``,
p99 ``delay_p99_ms``, capped at ``delay_max_ms`` = 5 s); *late* records (``late_share``)
arrive ``late_lag_s`` = 2-10 min after their event time. A record is counted late when its
lag exceeds ``LATE_THRESHOLD_MS`` (60 s), which no on-time record reaches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from headrace.pipelines.errors import PipelineError
from headrace.pipelines.fraud.geo import CITIES
from headrace.pipelines.fraud.truth import LATE_THRESHOLD_MS

DEFAULT_START_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: event time starts here unless told otherwise (fixed, so a seed
reproduces the same bytes)."""

NORMAL_MIN_GAP_MS = 80_000
NORMAL_TINY_SPACING_MS = 600_000
NORMAL_TINY_SHARE = 0.003
NORMAL_MIN_AMOUNT = 2.00
TINY_BELOW = 2.00
MERCHANT_JITTER_DEG = 0.02
SPAN_SHARE_OF_RUN = 0.8

VELOCITY_TXNS = (6, 10)
VELOCITY_SPAN_MS = (60_000, 150_000)
CARD_TESTING_TXNS = (5, 12)
CARD_TESTING_SPAN_MS = (45_000, 180_000)
TRAVEL_MIN_KM = 1500.0
TRAVEL_MIN_KMH = 2000.0
TRAVEL_MAX_GAP_MS = 15 * 60_000
ANOMALY_FACTOR = (1.5, 4.0)
SAFE_CAPACITY = 1.2


class FraudConfigError(PipelineError, ValueError):
    """A ``FraudConfig`` that cannot be generated as asked."""


@dataclass(frozen=True)
class FraudConfig:
    """What to generate. Rates of fraud are per minute of event time.

    ``users`` must be large enough that ``rate`` spreads over enough cards to keep every
    card under the normal-traffic limits (about ``1.2 * rate * min(80 s, duration)``
    cards, 1.5 per user): the default 100 000 sustains 1000 events/s for any duration.
    ``FraudGenerator`` raises ``FraudConfigError`` naming the users needed otherwise.
    """

    seed: int = 7
    rate: float = 1000.0
    duration_s: float = 30.0
    start_ms: int = DEFAULT_START_MS
    users: int = 100_000
    cards_per_user: tuple[int, int] = (1, 2)
    merchants: int = 500
    malformed_share: float = 0.002
    late_share: float = 0.01
    late_lag_s: tuple[float, float] = (120.0, 600.0)
    late_after_s: float = 0.0
    """No late record arrives in the run's first ``late_after_s`` seconds (a pipeline's first
    micro-batch has no watermark yet, so it cannot tell late records from on-time ones)."""
    delay_median_ms: float = 50.0
    delay_p99_ms: float = 1500.0
    delay_max_ms: int = 5_000
    velocity_bursts: float = 10.0
    impossible_travel: float = 10.0
    amount_anomalies: float = 10.0
    card_testing: float = 10.0
    profile_updates: float = 20.0
    traveller_share: float = 0.03
    id_prefix: str = ""
    """Put in every user and card id (``u<prefix>0000042``, ``c<prefix>00000420``): runs
    with different prefixes have disjoint cards, so a load generator may run several side by
    side (``load.py``)."""

    def __post_init__(self) -> None:
        def bad(msg: str) -> FraudConfigError:
            return FraudConfigError(f"FraudConfig: {msg}")

        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise bad(f"rate must be a positive number, not {self.rate}")
        if not (self.duration_s >= 0.1 and math.isfinite(self.duration_s)):
            raise bad(f"duration_s must be finite and >= 0.1, not {self.duration_s}")
        if self.users < 1:
            raise bad("users must be at least 1")
        lo, hi = self.cards_per_user
        if not 1 <= lo <= hi:
            raise bad(f"cards_per_user must be (min, max) with 1 <= min <= max, not {lo, hi}")
        if self.merchants < 2 * len(CITIES):
            raise bad(f"merchants must be at least {2 * len(CITIES)} (two per city)")
        for name in ("malformed_share", "late_share", "traveller_share"):
            share = getattr(self, name)
            if not 0.0 <= share <= 0.5:
                raise bad(f"{name} must be in [0, 0.5], not {share}")
        late_lo, late_hi = self.late_lag_s
        if not LATE_THRESHOLD_MS < late_lo * 1000 <= late_hi * 1000:
            raise bad(f"late_lag_s must be (min, max) with {LATE_THRESHOLD_MS / 1000:g} s "
                      f"< min <= max, not {late_lo, late_hi}")
        if not 0 < self.delay_median_ms <= self.delay_p99_ms <= self.delay_max_ms:
            raise bad("need 0 < delay_median_ms <= delay_p99_ms <= delay_max_ms")
        if self.delay_max_ms >= LATE_THRESHOLD_MS:
            raise bad(f"delay_max_ms must stay under the late threshold {LATE_THRESHOLD_MS}")
        for name in ("velocity_bursts", "impossible_travel", "amount_anomalies",
                     "card_testing", "profile_updates"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise bad(f"{name} must be a finite rate >= 0, not {value}")

    @property
    def duration_ms(self) -> int:
        return int(self.duration_s * 1000)

    @property
    def guard_ms(self) -> int:
        """How long before its first incident transaction a card stops normal traffic."""
        return int(self.late_lag_s[1] * 1000) + LATE_THRESHOLD_MS

    def expected_incidents(self) -> float:
        return (self.velocity_bursts + self.impossible_travel + self.amount_anomalies
                + self.card_testing) * self.duration_s / 60

    def required_users(self) -> int:
        """Users enough (with margin) to carry ``rate`` and the incidents' cards."""
        per_user = sum(self.cards_per_user) / 2
        cards = self.required_cards() + self.expected_incidents() + 1
        return math.ceil(cards / per_user * 1.05) + 20

    def required_cards(self) -> int:
        """Cards (not reserved for incidents) needed to keep the per-card guarantees."""
        # Cards resting at any instant: those used in the last 80 s of event time. Late
        # records are kept only if they arrive within the run, so on-time and late ones
        # together number about rate x duration, and rate x 80 s in any 80 s window.
        busy = self.rate * min(NORMAL_MIN_GAP_MS / 1000, self.duration_s)
        return math.ceil(SAFE_CAPACITY * busy) + 50


def guarantees() -> dict[str, Any]:
    """The normal-traffic limits, as recorded in every ground-truth document."""
    return {
        "normal_min_gap_ms": NORMAL_MIN_GAP_MS,
        "normal_max_txns_per_5min": 4,
        "normal_max_txns_per_3min": 3,
        "normal_max_speed_kmh": 300,
        "normal_amount_below_stdevs": 5,
        "normal_amount_below_mean_factor": 4.75,
        "normal_tiny_below": TINY_BELOW,
        "normal_max_tiny_per_10min": 1,
        "normal_max_delay_ms": "delay_max_ms (5000 by default)",
        "late_threshold_ms": LATE_THRESHOLD_MS,
        "velocity_min_txns": VELOCITY_TXNS[0],
        "velocity_max_span_ms": VELOCITY_SPAN_MS[1],
        "travel_min_km": TRAVEL_MIN_KM,
        "travel_min_kmh": TRAVEL_MIN_KMH,
        "anomaly_min_stdevs": 8,
        "anomaly_min_mean_factor": 5,
        "card_testing_min_txns": CARD_TESTING_TXNS[0],
        "card_testing_max_span_ms": CARD_TESTING_SPAN_MS[1],
    }
