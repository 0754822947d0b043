"""The fraud generator: determinism, incident properties, normal-traffic limits, shares,
ordering, record schemas, and a brute-force detector that must score precision = recall = 1."""

from __future__ import annotations

import json
import random
import statistics
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest

from headrace.errors import HeadraceError
from headrace.pipelines.fraud.config import (
    CARD_TESTING_SPAN_MS,
    NORMAL_MIN_GAP_MS,
    VELOCITY_SPAN_MS,
    FraudConfig,
    FraudConfigError,
)
from headrace.pipelines.fraud.generator import FraudGenerator, GeneratedEvent, generate
from headrace.pipelines.fraud.geo import CITIES, haversine_km, speed_kmh
from headrace.pipelines.fraud.truth import LATE_THRESHOLD_MS, GroundTruth

TXN_FIELDS = {"txn_id", "card_id", "user_id", "merchant_id", "amount", "currency", "lat",
              "lon", "city", "country", "category", "event_time"}
PROFILE_FIELDS = {"user_id", "home_city", "home_lat", "home_lon", "avg_amount", "std_amount",
                  "card_ids", "updated_at"}

# Five minutes at 50/s over barely enough cards: each card is reused ~3 times, so the
# per-card limits are really exercised; 4 incidents per minute of each pattern.
BUSY = FraudConfig(seed=3, rate=50, duration_s=300, users=3500, velocity_bursts=4,
                   impossible_travel=4, amount_anomalies=4, card_testing=4, profile_updates=10)
SMALL = FraudConfig(seed=5, rate=200, duration_s=5, users=2000)


@dataclass
class Run:
    config: FraudConfig
    events: list[GeneratedEvent]
    truth: GroundTruth
    txns: list[dict[str, Any]]
    """Valid transactions, parsed, in arrival order."""
    profiles: dict[str, list[dict[str, Any]]]
    """user_id -> profile versions in arrival order."""


def _run(config: FraudConfig) -> Run:
    gen = FraudGenerator(config)
    events = list(gen.events())
    txns = [json.loads(e.value) for e in events if e.kind == "txn"]
    profiles: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.kind == "profile":
            profiles[e.key.decode()].append(json.loads(e.value))
    return Run(config, events, gen.truth(), txns, profiles)


@pytest.fixture(scope="module")
def busy() -> Run:
    return _run(BUSY)


@pytest.fixture(scope="module")
def small() -> Run:
    return _run(SMALL)


def _fingerprint(events: Iterator[GeneratedEvent]) -> list[tuple[Any, ...]]:
    return [(e.arrival_ms, e.event_time, e.key, e.value, e.kind, e.late) for e in events]


def test_same_seed_same_bytes_whatever_the_global_random(small: Run) -> None:
    random.seed(1234)
    again = _fingerprint(generate(SMALL))
    assert again == _fingerprint(iter(small.events))
    gen = FraudGenerator(SMALL)
    list(gen.events())
    assert gen.truth().to_json() == small.truth.to_json()


def test_other_seed_other_bytes(small: Run) -> None:
    other = _fingerprint(generate(FraudConfig(seed=6, rate=200, duration_s=5, users=2000)))
    assert other != _fingerprint(iter(small.events))
    ours = {e.value for e in small.events if e.kind == "txn"}
    assert not ours & {v for *_, v, k, _ in other if k == "txn"}


def test_start_shifts_event_times_and_renews_txn_ids(small: Run) -> None:
    shifted = list(FraudGenerator(SMALL).stream(SMALL.start_ms + 10_000))
    stream = small.events[SMALL.users:]
    assert [e.event_time + 10_000 for e in stream] == [e.event_time for e in shifted]
    assert [e.arrival_ms + 10_000 for e in stream] == [e.arrival_ms for e in shifted]
    assert {e.txn_id for e in stream if e.txn_id}.isdisjoint(e.txn_id for e in shifted)


def test_profiles_first_then_arrival_order(busy: Run) -> None:
    n = BUSY.users
    assert all(e.kind == "profile" for e in busy.events[:n])
    assert len({e.key for e in busy.events[:n]}) == n
    arrivals = [e.arrival_ms for e in busy.events]
    assert arrivals == sorted(arrivals)
    assert arrivals[n] >= BUSY.start_ms
    times = [e.event_time for e in busy.events[n:]]
    assert times != sorted(times), "network delay must reorder some records"


def test_txn_records_follow_the_schema(busy: Run) -> None:
    cities = {c.name: c for c in CITIES}
    for e, txn in zip((e for e in busy.events if e.kind == "txn"), busy.txns, strict=True):
        assert set(txn) == TXN_FIELDS
        assert e.key.decode() == txn["card_id"] and e.txn_id == txn["txn_id"]
        assert e.event_time == txn["event_time"] and isinstance(txn["event_time"], int)
        assert isinstance(txn["amount"], float) and round(txn["amount"], 2) == txn["amount"]
        assert txn["currency"] == "EUR" and txn["amount"] > 0
        city = cities[txn["city"]]
        assert city.country == txn["country"]
        assert haversine_km(city.lat, city.lon, txn["lat"], txn["lon"]) < 4
    assert len({t["txn_id"] for t in busy.txns}) == len(busy.txns)


def test_incidents_have_their_property(busy: Run) -> None:
    by_id = {t["txn_id"]: t for t in busy.txns}
    patterns: dict[str, int] = defaultdict(int)
    for inc in busy.truth.incidents:
        patterns[inc.pattern] += 1
        txns = sorted((by_id[t] for t in inc.txn_ids), key=lambda t: t["event_time"])
        assert {t["card_id"] for t in txns} == {inc.card_id}
        assert txns[0]["event_time"] == inc.first_event_ms
        assert txns[-1]["event_time"] == inc.last_event_ms
        span = inc.last_event_ms - inc.first_event_ms
        if inc.pattern == "velocity":
            assert len(txns) >= 6 and span <= VELOCITY_SPAN_MS[1]
            assert all(t["amount"] >= 2.0 for t in txns)
        elif inc.pattern == "card_testing":
            assert len(txns) >= 5 and span <= CARD_TESTING_SPAN_MS[1]
            assert all(t["amount"] < 2.0 for t in txns)
        elif inc.pattern == "impossible_travel":
            a, b = txns
            assert haversine_km(a["lat"], a["lon"], b["lat"], b["lon"]) >= 1400
            kmh = speed_kmh(a["lat"], a["lon"], a["event_time"], b["lat"], b["lon"],
                            b["event_time"])
            assert kmh > 1000
        else:
            (txn,) = txns
            for p in busy.profiles[inc.user_id]:
                assert txn["amount"] > p["avg_amount"] + 8 * p["std_amount"]
                assert txn["amount"] > 5 * p["avg_amount"]
    assert all(patterns[p] >= 10 for p in
               ("velocity", "impossible_travel", "amount_anomaly", "card_testing"))
    assert len({i.card_id for i in busy.truth.incidents}) == len(busy.truth.incidents)


def test_normal_traffic_stays_under_the_thresholds(busy: Run) -> None:
    fraud = {t for inc in busy.truth.incidents for t in inc.txn_ids}
    first_fraud = {inc.card_id: inc.first_event_ms for inc in busy.truth.incidents}
    per_card: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in busy.txns:
        if t["txn_id"] not in fraud:
            per_card[t["card_id"]].append(t)
    reused = 0
    for card, txns in per_card.items():
        txns.sort(key=lambda t: t["event_time"])
        times = [t["event_time"] for t in txns]
        reused += len(txns) > 1
        for i, t in enumerate(times):
            assert sum(t <= u <= t + 300_000 for u in times[i:]) <= 4
            assert sum(t <= u <= t + 180_000 for u in times[i:]) <= 3
        assert all(b - a >= NORMAL_MIN_GAP_MS for a, b in pairwise(times))
        assert len({t["city"] for t in txns}) == 1
        for a in txns:
            for b in txns:
                if a is not b:
                    assert speed_kmh(a["lat"], a["lon"], a["event_time"], b["lat"], b["lon"],
                                     b["event_time"]) < 900
        tiny = [t["event_time"] for t in txns if t["amount"] < 2.0]
        assert all(b - a >= 600_000 for a, b in pairwise(tiny))
        versions = busy.profiles[txns[0]["user_id"]]
        for t in txns:
            for p in versions:
                assert t["amount"] < p["avg_amount"] + 5 * p["std_amount"]
        if card in first_fraud:
            assert times[-1] <= first_fraud[card] - BUSY.guard_ms
    assert reused > len(per_card) / 2, "the test must reuse cards to mean anything"
    tiny_share = sum(t["amount"] < 2.0 for t in busy.txns if t["txn_id"] not in fraud)
    assert tiny_share < 0.01 * len(busy.txns)


def _detect(run: Run) -> list[tuple[str, int, list[str]]]:
    """A plain rule detector with thresholds between the documented limits."""
    versions = {u: sorted(ps, key=lambda p: p["updated_at"]) for u, ps in run.profiles.items()}
    per_card: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in run.txns:
        per_card[t["card_id"]].append(t)
    alerts = []
    for card, txns in per_card.items():
        txns.sort(key=lambda t: t["event_time"])
        for i, t in enumerate(txns):
            now, reasons = t["event_time"], []
            recent = [u for u in txns[:i + 1] if now - u["event_time"] <= 180_000]
            if len(recent) >= 6:
                reasons.append("velocity")
            if sum(u["amount"] < 2.0 for u in txns[:i + 1]
                   if now - u["event_time"] <= 300_000) >= 5:
                reasons.append("card_testing")
            if i and speed_kmh(txns[i - 1]["lat"], txns[i - 1]["lon"], txns[i - 1]["event_time"],
                               t["lat"], t["lon"], now) > 1000:
                reasons.append("impossible_travel")
            p = [v for v in versions[t["user_id"]] if v["updated_at"] <= now][-1]
            if (t["amount"] > p["avg_amount"] + 8 * p["std_amount"]
                    and t["amount"] > 5 * p["avg_amount"]):
                reasons.append("amount_anomaly")
            if reasons:
                alerts.append((card, now, reasons))
    return alerts


def test_a_rule_detector_reaches_precision_and_recall_one(busy: Run) -> None:
    score = busy.truth.score(_detect(busy))
    assert score.false_positives == ()
    assert (score.precision, score.recall) == (1.0, 1.0)
    assert set(score.per_pattern_recall.values()) == {1.0} and len(score.per_pattern_recall) == 4


def test_shares_and_counts_match_the_config_and_the_truth() -> None:
    config = FraudConfig(seed=9, rate=400, duration_s=10, users=5000, malformed_share=0.05,
                         late_share=0.05)
    run = _run(config)
    stream = [e for e in run.events if e.kind != "profile"]
    malformed = [e for e in stream if e.kind == "malformed"]
    late = [e for e in stream if e.late]
    assert abs(len(malformed) / len(stream) - 0.05) < 0.0125
    assert abs(len(late) / len(stream) - 0.05) < 0.0125
    assert run.truth.malformed_count == len(malformed)
    assert set(run.truth.malformed_txn_ids) == {e.txn_id for e in malformed}
    assert run.truth.late_count == len(late)
    assert run.truth.total_txns == len(run.txns)
    assert run.truth.profile_records == sum(map(len, run.profiles.values()))
    assert all(e.kind == "txn" and e.lag_ms > LATE_THRESHOLD_MS for e in late)
    assert all(e.lag_ms <= config.delay_max_ms for e in stream if not e.late)
    assert all(config.start_ms <= e.arrival_ms < run.truth.end_ms for e in late)
    assert min(e.event_time for e in late) < config.start_ms  # late from before the start


def test_malformed_records_do_not_parse_as_transactions() -> None:
    config = FraudConfig(seed=2, rate=400, duration_s=5, users=3000, malformed_share=0.1)
    kinds: dict[str, int] = defaultdict(int)
    for e in generate(config):
        if e.kind != "malformed":
            continue
        try:
            record = json.loads(e.value.decode())
        except (UnicodeDecodeError, ValueError):
            kinds["invalid"] += 1
            continue
        if not set(record) >= TXN_FIELDS:
            kinds["missing"] += 1
        else:
            assert any(isinstance(record[f], str) for f in ("amount", "event_time", "lat"))
            kinds["wrong_type"] += 1
    assert min(kinds["invalid"], kinds["missing"], kinds["wrong_type"]) >= 5


def test_network_delay_is_lognormal_and_capped(busy: Run) -> None:
    lags = sorted(e.lag_ms for e in busy.events if e.kind == "txn" and not e.late)
    assert 35 <= statistics.median(lags) <= 70
    assert 700 <= lags[int(len(lags) * 0.99)] <= 3000
    assert lags[-1] <= BUSY.delay_max_ms


def test_per_card_arrival_order_breaks_only_for_late_records_or_inside_incidents(
        busy: Run) -> None:
    fraud = {t for inc in busy.truth.incidents for t in inc.txn_ids}
    per_card: dict[bytes, list[GeneratedEvent]] = defaultdict(list)
    for e in busy.events:
        if e.kind != "profile":
            per_card[e.key].append(e)
    late_inversions = 0
    for events in per_card.values():
        for a, b in pairwise(events):  # in arrival order
            if b.event_time < a.event_time:
                assert b.late or a.late or {a.txn_id, b.txn_id} <= fraud
                late_inversions += b.late
        on_time = [e.event_time for e in events if not e.late and e.txn_id not in fraud]
        assert on_time == sorted(on_time)
    assert late_inversions > 0


def test_profiles_and_their_updates(busy: Run) -> None:
    cards_of = defaultdict(set)
    where = {}
    for t in busy.txns:
        cards_of[t["user_id"]].add(t["card_id"])
        where[t["user_id"]] = t["city"]
    moves = raises = 0
    for user, versions in busy.profiles.items():
        assert all(set(p) == PROFILE_FIELDS and p["user_id"] == user for p in versions)
        assert cards_of[user] <= set(versions[0]["card_ids"])
        assert versions[0]["updated_at"] < BUSY.start_ms
        for old, new in pairwise(versions):
            assert BUSY.start_ms <= new["updated_at"] < busy.truth.end_ms
            if new["home_city"] != old["home_city"]:
                moves += 1
                assert user not in where or where[user] == new["home_city"]
            else:
                raises += 1
                assert new["avg_amount"] > old["avg_amount"]
                assert new["std_amount"] > old["std_amount"]
    assert moves >= 5 and raises >= 5
    assert len(busy.profiles) == BUSY.users


def test_truth_of_a_partly_consumed_stream() -> None:
    gen = FraudGenerator(FraudConfig(seed=4, rate=300, duration_s=20, users=6000,
                                     velocity_bursts=30))
    events = gen.events()
    taken = [next(events) for _ in range(6000 + 2500)]
    truth = gen.truth()
    assert truth.total_txns == sum(e.kind == "txn" for e in taken)
    assert truth.profile_records == sum(e.kind == "profile" for e in taken)
    seen = {e.txn_id for e in taken}
    assert all(set(i.txn_ids) <= seen for i in truth.incidents)
    assert all(not set(i.txn_ids) <= seen and set(i.txn_ids) & seen
               for i in truth.partial_incidents)
    with pytest.raises(HeadraceError):
        gen.stream(0)


@pytest.mark.parametrize("changes", [
    {"rate": 0}, {"duration_s": float("inf")}, {"users": 0}, {"cards_per_user": (2, 1)},
    {"merchants": 10}, {"late_share": 0.7}, {"late_lag_s": (30.0, 600.0)},
    {"delay_max_ms": 70_000, "delay_p99_ms": 1500}, {"velocity_bursts": -1.0},
])
def test_bad_configs_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(FraudConfigError):
        FraudConfig(**changes)


def test_too_few_users_for_the_rate_names_the_users_needed() -> None:
    with pytest.raises(FraudConfigError, match=r"use users >= \d+") as info:
        FraudGenerator(FraudConfig(rate=1000, duration_s=10, users=2000))
    assert isinstance(info.value, HeadraceError)
    needed = int(str(info.value).rsplit(" ", 1)[1])
    FraudGenerator(FraudConfig(rate=1000, duration_s=10, users=needed))


def test_geo_distances() -> None:
    paris, london, sydney = (next(c for c in CITIES if c.name == n)
                             for n in ("Paris", "London", "Sydney"))
    assert 330 < haversine_km(paris.lat, paris.lon, london.lat, london.lon) < 360
    assert 16_900 < haversine_km(paris.lat, paris.lon, sydney.lat, sydney.lon) < 17_000
    assert speed_kmh(paris.lat, paris.lon, 0, sydney.lat, sydney.lon, 1_800_000) > 30_000
    assert len(CITIES) >= 40 and len({c.name for c in CITIES}) == len(CITIES)
