"""The record stream of a fraud run, in arrival order.

Event time is generated in chunks (250 ms): normal transactions as a Poisson process, each
assigned a random card among those that have rested ``NORMAL_MIN_GAP_MS``; late ones as a
Poisson process 2-10 min in the past, kept when they arrive within the run; incident
transactions and profile updates as planned. Each record gets its arrival time (event time
plus network delay) and waits in a heap until no later chunk can produce an earlier
arrival. Memory is bounded by the late window, not by the run's length.

Order per card (Kafka keeps a key's records in the order they are produced, i.e. arrival
order): a card's on-time records are at least 80 s apart and delayed at most 5 s, so they
arrive in event-time order; a late record arrives after the card's later records; inside an
incident, records seconds apart may swap when their delays differ.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from random import Random
from typing import Any, Literal

from headrace.pipelines.fraud.config import (
    NORMAL_MIN_GAP_MS,
    NORMAL_TINY_SHARE,
    NORMAL_TINY_SPACING_MS,
    FraudConfig,
    FraudConfigError,
    guarantees,
)
from headrace.pipelines.fraud.geo import CITIES
from headrace.pipelines.fraud.incidents import PlannedTxn, plan_incidents
from headrace.pipelines.fraud.truth import GroundTruth, Incident, TruthRecorder
from headrace.pipelines.fraud.world import Merchant, ProfileUpdate, World, dumps, profile_json

EventKind = Literal["txn", "malformed", "profile"]
CHUNK_MS = 250
PROFILE_AGE_MS = 86_400_000
"""Initial profiles say they were last updated this long before the run's start."""
REQUIRED_FIELDS = ("txn_id", "card_id", "amount", "event_time", "merchant_id", "lat", "lon")
Z99 = 2.326348


@dataclass(frozen=True, slots=True)
class GeneratedEvent:
    """One record to produce. ``key`` is the card id (transactions, malformed ones too) or
    the user id (profiles). ``late`` is true for transactions whose ``lag_ms`` exceeds the
    late threshold. ``txn_id`` is the transaction's id, ``None`` for profiles."""

    arrival_ms: int
    event_time: int
    key: bytes
    value: bytes
    kind: EventKind
    late: bool = False
    txn_id: str | None = None

    @property
    def lag_ms(self) -> int:
        return self.arrival_ms - self.event_time


class GeneratorError(FraudConfigError):
    """The generator ran out of rested cards (``users`` too small for ``rate``)."""


def seeded(seed: int, name: str) -> Random:
    """An independent, reproducible random stream (str seeds hash with SHA-512)."""
    return Random(f"headrace.fraud/{seed}/{name}")


class _CardPool:
    """Cards free for normal traffic: ``take(t)`` must be called with non-decreasing ``t``."""

    def __init__(self, n: int, retired: list[bool], rng: Random) -> None:
        self.retired = retired
        self.free = [c for c in range(n) if not retired[c]]
        self.resting: deque[tuple[int, int]] = deque()
        self.rng = rng

    def take(self, t: int) -> int:
        resting, free, retired = self.resting, self.free, self.retired
        while resting and resting[0][0] <= t:
            card = resting.popleft()[1]
            if not retired[card]:
                free.append(card)
        while free:
            i = self.rng.randrange(len(free))
            card = free[i]
            free[i] = free[-1]
            free.pop()
            if not retired[card]:
                resting.append((t + NORMAL_MIN_GAP_MS, card))
                return card
        raise GeneratorError("no rested card left: raise FraudConfig.users")


class FraudGenerator:
    """Deterministic fraud stream for one ``FraudConfig``.

    Construction builds the world and plans incidents (CPU-bound: about 1.5 s per 100 000
    users); it raises ``FraudConfigError`` if ``users`` cannot carry ``rate``. Then
    ``events()`` (or ``profile_events()`` and ``stream()`` separately, which lets a live
    run pick its start once profiles are out) yields records lazily in arrival order.
    ``stream()`` may run once per generator. ``truth()`` describes what was yielded so far.
    Not thread-safe. Uses its own ``random.Random`` streams only: same seed and start, same
    bytes; txn ids also depend on the start, so live runs never repeat ids.
    """

    def __init__(self, config: FraudConfig) -> None:
        self.config = config
        self.world = World(config, seeded(config.seed, "world"))
        self.incidents = plan_incidents(config, self.world, seeded(config.seed, "incidents"))
        free, needed = len(self.world.cards) - len(self.incidents), config.required_cards()
        if free < needed:
            raise FraudConfigError(
                f"{config.users} users hold {free} cards free for normal traffic; "
                f"rate {config.rate:g}/s needs {needed}: use users >= "
                f"{max(config.users + 1, config.required_users())}")
        self._initial = [(u.home, u.avg, u.std) for u in self.world.users]
        self._initial_profiles = 0
        self._recorder: TruthRecorder | None = None
        self._start_ms = config.start_ms

    def events(self, start_ms: int | None = None) -> Iterator[GeneratedEvent]:
        """Initial profiles, then the stream; ``start_ms`` defaults to the config's."""
        start = self.config.start_ms if start_ms is None else start_ms
        yield from self.profile_events(start)
        yield from self.stream(start)

    def profile_events(self, start_ms: int) -> Iterator[GeneratedEvent]:
        """Every user's profile as it stands before the run, ``arrival_ms = start_ms``."""
        updated = start_ms - PROFILE_AGE_MS
        for user, (home, avg, std) in zip(self.world.users, self._initial, strict=True):
            self._initial_profiles += 1
            yield GeneratedEvent(start_ms, updated, user.user_id.encode(),
                                 profile_json(user, home, avg, std, updated), "profile")

    def stream(self, start_ms: int) -> Iterator[GeneratedEvent]:
        """Transactions, malformed records and profile updates of the run starting at
        ``start_ms``, in arrival order (ties: generation order)."""
        if self._recorder is not None:
            raise GeneratorError("FraudGenerator.stream() runs once per generator")
        self._start_ms = start_ms
        ids = Random(f"headrace.fraud/{self.config.seed}/{start_ms}/ids")
        planned, incident_txns, retirements = [], [], []
        for inc in self.incidents:
            card_id, user_index = self.world.cards[inc.card]
            tids = tuple(_txn_id(ids) for _ in inc.txns)
            times = [start_ms + t.offset_ms for t in inc.txns]
            planned.append(Incident(card_id, self.world.users[user_index].user_id, inc.pattern,
                                    min(times), max(times), tids))
            retirements.append((min(times) - self.config.guard_ms, inc.card))
            incident_txns += [(t, inc.card, p, tid)
                              for t, p, tid in zip(times, inc.txns, tids, strict=True)]
        incident_txns.sort(key=lambda x: (x[0], x[3]))
        retirements.sort()
        self._recorder = TruthRecorder(self.config.seed, start_ms,
                                       start_ms + self.config.duration_ms, len(self.world.users),
                                       planned, guarantees())
        return _Run(self, start_ms, ids, incident_txns, retirements,
                    self._recorder).records()

    def truth(self) -> GroundTruth:
        """Ground truth of the records yielded so far (all of them once exhausted)."""
        if self._recorder is None:
            recorder = TruthRecorder(self.config.seed, self._start_ms,
                                     self._start_ms + self.config.duration_ms,
                                     len(self.world.users), (), guarantees())
        else:
            recorder = self._recorder
        truth = recorder.build()
        return dataclasses.replace(
            truth, profile_records=truth.profile_records + self._initial_profiles)


def _txn_id(ids: Random) -> str:
    return str(uuid.UUID(int=ids.getrandbits(128), version=4))


class _Run:
    """The state of one ``stream()``: card pool, network, heap of records by arrival."""

    def __init__(self, gen: FraudGenerator, start: int, ids: Random,
                 incident_txns: list[tuple[int, int, PlannedTxn, str]],
                 retirements: list[tuple[int, int]], recorder: TruthRecorder) -> None:
        cfg = gen.config
        self.cfg, self.world, self.ids, self.recorder = cfg, gen.world, ids, recorder
        self.start, self.end = start, start + cfg.duration_ms
        self.rng = seeded(cfg.seed, "traffic")
        self.net = seeded(cfg.seed, "network")
        self.incident_txns, self.retirements = incident_txns, retirements
        self.updates: list[ProfileUpdate] = gen.world.updates
        n_cards = len(self.world.cards)
        self.retired = [False] * n_cards
        self.pool = _CardPool(n_cards, self.retired, seeded(cfg.seed, "cards"))
        self.last_tiny = [-NORMAL_TINY_SPACING_MS] * n_cards
        self.delay_mu = math.log(cfg.delay_median_ms)
        self.delay_sigma = (math.log(cfg.delay_p99_ms) - self.delay_mu) / Z99
        self.malformed_p = cfg.malformed_share / (1 - cfg.late_share)
        self.heap: list[tuple[int, int, GeneratedEvent]] = []
        self.seq = 0

    def records(self) -> Iterator[GeneratedEvent]:
        cfg, rng = self.cfg, self.rng
        late_lo, late_hi = (int(s * 1000) for s in cfg.late_lag_s)
        on_rate = cfg.rate * (1 - cfg.late_share) / 1000
        late_rate = cfg.rate * cfg.late_share / 1000
        next_on = self.start + rng.expovariate(on_rate)
        next_late = self.start - late_hi + (rng.expovariate(late_rate) if late_rate else 0.0)
        late_end = self.end - late_lo if late_rate else -math.inf
        i_inc = i_ret = i_upd = 0
        a, b = self.start - late_hi, self.start
        while a < self.end:
            # (time, order at equal times, index): retire < update < incident < normal
            items: list[tuple[int, int, int]] = []
            lags: list[int] = []
            while i_ret < len(self.retirements) and self.retirements[i_ret][0] < b:
                items.append((self.retirements[i_ret][0], 0, i_ret))
                i_ret += 1
            while i_upd < len(self.updates) and self.start + self.updates[i_upd].offset_ms < b:
                items.append((self.start + self.updates[i_upd].offset_ms, 1, i_upd))
                i_upd += 1
            while i_inc < len(self.incident_txns) and self.incident_txns[i_inc][0] < b:
                items.append((self.incident_txns[i_inc][0], 2, i_inc))
                i_inc += 1
            while next_on < b and next_on < self.end:
                items.append((int(next_on), 3, -1))
                next_on += rng.expovariate(on_rate)
            while next_late < b and next_late < late_end:
                e, lag = int(next_late), rng.randint(late_lo, late_hi)
                if self.start + cfg.late_after_s * 1000 <= e + lag < self.end:
                    items.append((e, 3, len(lags)))
                    lags.append(lag)
                next_late += rng.expovariate(late_rate)
            items.sort()
            for t, order, i in items:
                if order == 0:
                    self.retired[self.retirements[i][1]] = True
                elif order == 1:
                    self._update(t, self.updates[i])
                elif order == 2:
                    _, card, p, tid = self.incident_txns[i]
                    self._txn(t, card, p.merchant, p.amount, tid, self._delay(), False)
                else:
                    self._normal(t, lags[i] if i >= 0 else None)
            limit = b if b < self.end else math.inf
            while self.heap and self.heap[0][0] < limit:
                event = heapq.heappop(self.heap)[2]
                self.recorder.observe(event.kind, event.txn_id, event.lag_ms)
                yield event
            a, b = b, min(b + CHUNK_MS, self.end)

    def _delay(self) -> int:
        d = self.net.lognormvariate(self.delay_mu, self.delay_sigma)
        return min(self.cfg.delay_max_ms, int(d))

    def _push(self, event: GeneratedEvent) -> None:
        heapq.heappush(self.heap, (event.arrival_ms, self.seq, event))
        self.seq += 1

    def _update(self, t: int, update: ProfileUpdate) -> None:
        user = self.world.users[update.user]
        user.home = update.home
        user.set_spending(update.avg_amount, update.std_amount)
        value = profile_json(user, user.home, user.avg, user.std, t)
        self._push(GeneratedEvent(t + self._delay(), t, user.user_id.encode(), value, "profile"))

    def _normal(self, t: int, late_lag: int | None) -> None:
        rng = self.rng
        card = self.pool.take(t)
        user = self.world.users[self.world.cards[card][1]]
        merchant = rng.choice(self.world.by_city[user.location])
        if rng.random() < NORMAL_TINY_SHARE and t - self.last_tiny[card] >= NORMAL_TINY_SPACING_MS:
            self.last_tiny[card] = t
            amount = round(rng.uniform(0.5, 1.99), 2)
        else:
            amount = user.normal_amount(rng)
        tid = _txn_id(self.ids)
        if late_lag is not None:
            self._txn(t, card, merchant, amount, tid, late_lag, True)
        elif rng.random() < self.malformed_p:
            record = self._record(t, card, merchant, amount, tid)
            self._push(GeneratedEvent(t + self._delay(), t, record["card_id"].encode(),
                                      self._corrupt(record), "malformed", False, tid))
        else:
            self._txn(t, card, merchant, amount, tid, self._delay(), False)

    def _record(self, t: int, card: int, merchant: Merchant, amount: float,
                tid: str) -> dict[str, Any]:
        card_id, user_index = self.world.cards[card]
        city = CITIES[merchant.city]
        return {"txn_id": tid, "card_id": card_id,
                "user_id": self.world.users[user_index].user_id,
                "merchant_id": merchant.merchant_id, "amount": amount, "currency": "EUR",
                "lat": merchant.lat, "lon": merchant.lon, "city": city.name,
                "country": city.country, "category": merchant.category, "event_time": t}

    def _txn(self, t: int, card: int, merchant: Merchant, amount: float, tid: str, lag: int,
             late: bool) -> None:
        record = self._record(t, card, merchant, amount, tid)
        self._push(GeneratedEvent(t + lag, t, record["card_id"].encode(), dumps(record), "txn",
                                  late, tid))

    def _corrupt(self, record: dict[str, Any]) -> bytes:
        """Invalid JSON (truncated, or not UTF-8), a missing required field, or a wrong type."""
        rng = self.rng
        variant = rng.randrange(4)
        if variant == 0:
            data = dumps(record)
            return data[:rng.randrange(1, len(data) - 1)]
        if variant == 1:
            return b"\xff" + bytes(rng.getrandbits(8) for _ in range(rng.randint(8, 40)))
        if variant == 2:
            del record[rng.choice(REQUIRED_FIELDS)]
            return dumps(record)
        field = rng.choice(("amount", "event_time", "lat"))
        record[field] = {"amount": "abc", "event_time": "yesterday", "lat": "north"}[field]
        return dumps(record)
