"""The entities of a fraud run: merchants in cities, users with spending habits, their cards,
and the profile updates planned for the run.

Built once per ``FraudGenerator`` from its own ``random.Random`` stream, independent of the
run's start time (profile updates carry offsets from the start, not instants).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from random import Random

from headrace.pipelines.fraud.config import (
    MERCHANT_JITTER_DEG,
    NORMAL_MIN_AMOUNT,
    FraudConfig,
)
from headrace.pipelines.fraud.geo import CITIES

DIGITAL = "digital_goods"
CATEGORIES: tuple[tuple[str, float], ...] = (
    ("grocery", 30), ("restaurant", 20), ("fuel", 10), ("fashion", 10), ("pharmacy", 8),
    ("entertainment", 8), ("electronics", 6), ("travel", 4), ("jewelry", 2), (DIGITAL, 6),
)
HIGH_VALUE = frozenset({"electronics", "jewelry", "travel"})


@dataclass(frozen=True, slots=True)
class Merchant:
    merchant_id: str
    city: int
    lat: float
    lon: float
    category: str


@dataclass(frozen=True, slots=True)
class ProfileUpdate:
    """A profile change ``offset_ms`` after the run's start: a move (``home`` becomes the city
    the user is in) or a spending change."""

    offset_ms: int
    user: int
    home: int
    avg_amount: float
    std_amount: float


class User:
    """A card holder. ``location`` is where the user is during the run (home, unless a
    traveller); ``clip`` bounds normal amounts below mean + 5 stdev of every profile
    version; ``anomaly_floor`` is max(mean + 8 stdev, 5 x mean) over the versions."""

    __slots__ = ("anomaly_floor", "avg", "card_ids", "clip", "home", "index", "location", "mu",
                 "sigma", "std", "user_id")

    def __init__(self, index: int, home: int, location: int, avg: float, std: float,
                 id_prefix: str = "") -> None:
        self.index = index
        self.user_id = f"u{id_prefix}{index:07d}"
        self.home = home
        self.location = location
        self.card_ids: list[str] = []
        self.avg = self.std = self.mu = self.sigma = 0.0
        self.set_spending(avg, std)
        self.clip = math.floor((avg + 5 * std) * 100) / 100 - 0.01
        self.anomaly_floor = max(avg + 8 * std, 5 * avg)

    def set_spending(self, avg: float, std: float) -> None:
        self.avg, self.std = avg, std
        self.sigma = math.sqrt(math.log1p((std / avg) ** 2))
        self.mu = math.log(avg) - self.sigma ** 2 / 2

    def normal_amount(self, rng: Random) -> float:
        """An amount from the user's current lognormal, kept in [2.00, clip]."""
        for _ in range(8):
            amount = round(rng.lognormvariate(self.mu, self.sigma), 2)
            if NORMAL_MIN_AMOUNT <= amount <= self.clip:
                return amount
        return min(self.clip, max(NORMAL_MIN_AMOUNT, round(self.avg, 2)))



def profile_json(user: User, home: int, avg: float, std: float, updated_at: int) -> bytes:
    """The profile record of ``user`` with the given home city, spending and timestamp."""
    city = CITIES[home]
    return dumps({"user_id": user.user_id, "home_city": city.name, "home_lat": city.lat,
                  "home_lon": city.lon, "avg_amount": avg, "std_amount": std,
                  "card_ids": user.card_ids, "updated_at": updated_at})


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(obj: object) -> bytes:
    """Compact UTF-8 JSON."""
    return _ENCODER.encode(obj).encode()


def count_for(expected: float, rng: Random) -> int:
    """``expected`` rounded up or down at random, so that its mean is ``expected``."""
    whole = math.floor(expected)
    return whole + (1 if rng.random() < expected - whole else 0)


class World:
    """Merchants, users and cards (``cards[i]`` = (card_id, user index)), and the profile
    updates of the run, sorted by offset."""

    def __init__(self, config: FraudConfig, rng: Random) -> None:
        self.merchants = _merchants(config.merchants, rng)
        self.by_city: list[list[Merchant]] = [[] for _ in CITIES]
        self.digital_by_city: list[list[Merchant]] = [[] for _ in CITIES]
        self.high_value_by_city: list[list[Merchant]] = [[] for _ in CITIES]
        for m in self.merchants:
            self.by_city[m.city].append(m)
            if m.category == DIGITAL:
                self.digital_by_city[m.city].append(m)
            if m.category in HIGH_VALUE:
                self.high_value_by_city[m.city].append(m)
        self.users: list[User] = []
        self.cards: list[tuple[str, int]] = []
        self.travellers: list[int] = []
        cum = list(accumulate(c.weight for c in CITIES))
        lo, hi = config.cards_per_user
        for i in range(config.users):
            home = bisect_right(cum, rng.random() * cum[-1])
            location = home
            if rng.random() < config.traveller_share:
                location = rng.randrange(len(CITIES) - 1)
                location += location >= home
                self.travellers.append(i)
            avg = round(min(400.0, max(8.0, rng.lognormvariate(math.log(40.0), 0.6))), 2)
            std = round(avg * rng.uniform(0.25, 0.75), 2)
            user = User(i, home, location, avg, std, config.id_prefix)
            for k in range(rng.randint(lo, hi)):
                card_id = f"c{config.id_prefix}{i:07d}{k}"
                user.card_ids.append(card_id)
                self.cards.append((card_id, i))
            self.users.append(user)
        self.updates = self._plan_updates(config, rng)

    def _plan_updates(self, config: FraudConfig, rng: Random) -> list[ProfileUpdate]:
        """About half the updates move a traveller's home to the city they are in (their
        transactions do not jump), the others raise a user's mean and stdev, so the limits
        of ``User`` hold across versions."""
        n = min(len(self.users), count_for(config.profile_updates * config.duration_s / 60, rng))
        picked = rng.sample(self.travellers, min(len(self.travellers), (n + 1) // 2))
        taken = set(picked)
        while len(picked) < n:
            index = rng.randrange(len(self.users))
            if index not in taken:
                taken.add(index)
                picked.append(index)
        updates = []
        for index in picked:
            user = self.users[index]
            offset = rng.randrange(config.duration_ms)
            if user.location != user.home:
                update = ProfileUpdate(offset, index, user.location, user.avg, user.std)
            else:
                update = ProfileUpdate(offset, index, user.home,
                                       round(user.avg * rng.uniform(1.05, 1.3), 2),
                                       round(user.std * rng.uniform(1.05, 1.3), 2))
            user.anomaly_floor = max(user.anomaly_floor, update.avg_amount + 8 * update.std_amount,
                                     5 * update.avg_amount)
            updates.append(update)
        updates.sort(key=lambda u: (u.offset_ms, u.user))
        return updates


def _merchants(n: int, rng: Random) -> list[Merchant]:
    names = [c for c, _ in CATEGORIES]
    cum = list(accumulate(w for _, w in CATEGORIES))
    out = []
    for i in range(n):
        city_index = i % len(CITIES)
        city = CITIES[city_index]
        # The first merchant of each city is digital (card testing needs one everywhere),
        # the second high-value (amount anomalies prefer one).
        if i < len(CITIES):
            category = DIGITAL
        elif i < 2 * len(CITIES):
            category = "electronics"
        else:
            category = names[bisect_right(cum, rng.random() * cum[-1])]
        dlat = rng.uniform(-MERCHANT_JITTER_DEG, MERCHANT_JITTER_DEG)
        dlon = rng.uniform(-MERCHANT_JITTER_DEG, MERCHANT_JITTER_DEG)
        dlon /= max(0.2, math.cos(math.radians(city.lat)))
        out.append(Merchant(f"m{i:05d}", city_index, round(city.lat + dlat, 5),
                            round(city.lon + dlon, 5), category))
    return out
