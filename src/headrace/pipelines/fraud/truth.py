"""Ground truth of a fraud-generator run, and the scoring of a detector's alerts against it.

An **incident** is one injected fraud pattern on one card: its transactions and the event
time span they cover. An alert ``(card_id, event_time_ms, reasons)`` *matches* an incident
when it names the same card and its event time falls in
``[first_event_ms - 1 s, last_event_ms + 5 min]``; the reasons are not scored (an
impossible-travel rule firing on a velocity burst still found the fraud).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from headrace.pipelines.errors import PipelineError

Pattern = Literal["velocity", "impossible_travel", "amount_anomaly", "card_testing"]
PATTERNS: tuple[Pattern, ...] = get_args(Pattern)

MATCH_BEFORE_MS = 1_000
MATCH_AFTER_MS = 300_000
LATE_THRESHOLD_MS = 60_000
"""An event is *late* when its arrival trails its event time by more than this."""

Alert = tuple[str, int, Any]
"""``(card_id, event_time_ms, reasons)`` as a detector reports it."""


class TruthError(PipelineError):
    """A ground-truth document could not be read."""


@dataclass(frozen=True, slots=True)
class Incident:
    """One injected fraud pattern on one card. Times are event times in epoch ms."""

    card_id: str
    user_id: str
    pattern: Pattern
    first_event_ms: int
    last_event_ms: int
    txn_ids: tuple[str, ...]

    def matches(self, card_id: str, event_time_ms: int) -> bool:
        return (card_id == self.card_id
                and self.first_event_ms - MATCH_BEFORE_MS <= event_time_ms
                <= self.last_event_ms + MATCH_AFTER_MS)

    def to_dict(self) -> dict[str, Any]:
        return {"card_id": self.card_id, "user_id": self.user_id, "pattern": self.pattern,
                "first_event_ms": self.first_event_ms, "last_event_ms": self.last_event_ms,
                "txn_ids": list(self.txn_ids)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Incident:
        pattern = d["pattern"]
        if pattern not in PATTERNS:
            raise TruthError(f"unknown fraud pattern {pattern!r}")
        return cls(str(d["card_id"]), str(d["user_id"]), pattern, int(d["first_event_ms"]),
                   int(d["last_event_ms"]), tuple(str(t) for t in d["txn_ids"]))


@dataclass(frozen=True)
class Score:
    """How a detector's alerts compare with the truth.

    ``precision`` = matched alerts / scored alerts (1.0 when there are none);
    ``recall`` = matched incidents / incidents (1.0 when there are none). Alerts that only
    match an incident the run did not finish emitting are ``ignored``: neither right nor
    wrong. ``per_pattern_recall`` has an entry for each pattern with at least one incident.
    """

    precision: float
    recall: float
    per_pattern_recall: Mapping[str, float]
    alerts: int
    matched_alerts: int
    ignored_alerts: int
    incidents: int
    matched_incidents: int
    false_positives: tuple[Alert, ...] = field(repr=False)

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 0.0 if total == 0 else 2 * self.precision * self.recall / total


@dataclass(frozen=True)
class GroundTruth:
    """What a run emitted. Counts cover the records actually emitted, in any order.

    ``total_txns`` counts valid transaction records (incident ones included);
    ``malformed_count`` the records a parser must reject; ``late_count`` the valid
    transactions whose arrival trailed their event time by more than
    ``late_threshold_ms``; ``profile_records`` every profile record (initial + updates).
    ``partial_incidents`` were cut short by a stop and are not scored.
    """

    seed: int
    start_ms: int
    end_ms: int
    incidents: tuple[Incident, ...]
    total_txns: int
    malformed_count: int
    malformed_txn_ids: tuple[str, ...]
    late_count: int
    profile_records: int
    users: int
    late_threshold_ms: int = LATE_THRESHOLD_MS
    partial_incidents: tuple[Incident, ...] = ()
    guarantees: Mapping[str, Any] = field(default_factory=dict)

    def score(self, alerts: Iterable[Alert]) -> Score:
        """Score alerts against the incidents. Pure; an alert may match several incidents
        (it then counts once as matched and marks each of them found)."""
        by_card: dict[str, list[tuple[int, Incident]]] = defaultdict(list)
        for n, inc in enumerate(self.incidents):
            by_card[inc.card_id].append((n, inc))
        partial_by_card: dict[str, list[Incident]] = defaultdict(list)
        for inc in self.partial_incidents:
            partial_by_card[inc.card_id].append(inc)
        found: set[int] = set()
        n_alerts = matched = ignored = 0
        false_positives: list[Alert] = []
        for alert in alerts:
            card_id, t = alert[0], int(alert[1])
            hits = [n for n, i in by_card.get(card_id, ()) if i.matches(card_id, t)]
            if hits:
                n_alerts += 1
                matched += 1
                found.update(hits)
            elif any(i.matches(card_id, t) for i in partial_by_card.get(card_id, ())):
                ignored += 1
            else:
                n_alerts += 1
                false_positives.append(alert)
        per_pattern: dict[str, float] = {}
        for pattern in PATTERNS:
            ns = [n for n, i in enumerate(self.incidents) if i.pattern == pattern]
            if ns:
                per_pattern[pattern] = sum(n in found for n in ns) / len(ns)
        n_inc = len(self.incidents)
        return Score(
            precision=matched / n_alerts if n_alerts else 1.0,
            recall=len(found) / n_inc if n_inc else 1.0,
            per_pattern_recall=per_pattern, alerts=n_alerts, matched_alerts=matched,
            ignored_alerts=ignored, incidents=n_inc, matched_incidents=len(found),
            false_positives=tuple(false_positives))

    def to_json(self) -> str:
        return json.dumps({
            "seed": self.seed, "start_ms": self.start_ms, "end_ms": self.end_ms,
            "total_txns": self.total_txns, "malformed_count": self.malformed_count,
            "malformed_txn_ids": list(self.malformed_txn_ids),
            "late_count": self.late_count, "late_threshold_ms": self.late_threshold_ms,
            "profile_records": self.profile_records, "users": self.users,
            "guarantees": dict(self.guarantees),
            "incidents": [i.to_dict() for i in self.incidents],
            "partial_incidents": [i.to_dict() for i in self.partial_incidents],
        }, indent=1, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> GroundTruth:
        """Inverse of ``to_json``; ``TruthError`` on a document that is not one."""
        try:
            d = json.loads(text)
            return cls(
                seed=int(d["seed"]), start_ms=int(d["start_ms"]), end_ms=int(d["end_ms"]),
                incidents=tuple(Incident.from_dict(i) for i in d["incidents"]),
                total_txns=int(d["total_txns"]), malformed_count=int(d["malformed_count"]),
                malformed_txn_ids=tuple(str(t) for t in d["malformed_txn_ids"]),
                late_count=int(d["late_count"]), profile_records=int(d["profile_records"]),
                users=int(d["users"]), late_threshold_ms=int(d["late_threshold_ms"]),
                partial_incidents=tuple(Incident.from_dict(i)
                                        for i in d.get("partial_incidents", ())),
                guarantees=dict(d.get("guarantees", {})))
        except (ValueError, KeyError, TypeError) as e:
            raise TruthError(f"not a fraud ground-truth document: {e}") from e


class TruthRecorder:
    """Builds a ``GroundTruth`` from the events a generator actually emits.

    ``planned`` are the incidents the generator scheduled; one counts as emitted once all
    its transactions were observed, as partial if only some were. Not thread-safe.
    """

    def __init__(self, seed: int, start_ms: int, end_ms: int, users: int,
                 planned: Iterable[Incident], guarantees: Mapping[str, Any]) -> None:
        self._seed, self._start, self._end, self._users = seed, start_ms, end_ms, users
        self._planned = tuple(planned)
        self._guarantees = dict(guarantees)
        self._pending = {t: n for n, inc in enumerate(self._planned) for t in inc.txn_ids}
        self._seen_per_incident = [0] * len(self._planned)
        self.txns = self.late = self.profiles = 0
        self.malformed: list[str] = []

    def observe(self, kind: str, txn_id: str | None, lag_ms: int) -> None:
        """Record one emitted event (``kind`` as in ``GeneratedEvent``)."""
        if kind == "profile":
            self.profiles += 1
            return
        if kind == "malformed":
            self.malformed.append(txn_id or "")
            return
        self.txns += 1
        if lag_ms > LATE_THRESHOLD_MS:
            self.late += 1
        n = self._pending.pop(txn_id, None) if txn_id is not None else None
        if n is not None:
            self._seen_per_incident[n] += 1

    def build(self) -> GroundTruth:
        done, partial = [], []
        for inc, seen in zip(self._planned, self._seen_per_incident, strict=True):
            if seen == len(inc.txn_ids):
                done.append(inc)
            elif seen:
                partial.append(inc)
        return GroundTruth(
            seed=self._seed, start_ms=self._start, end_ms=self._end, incidents=tuple(done),
            total_txns=self.txns, malformed_count=len(self.malformed),
            malformed_txn_ids=tuple(self.malformed), late_count=self.late,
            profile_records=self.profiles, users=self._users, partial_incidents=tuple(partial),
            guarantees=self._guarantees)
