"""Rules written in Python, compiled for Spark's Real-Time Mode: the declarative rule API.

A ``RuleSet`` describes per-key detection over a stream: each rule is one of

- ``WindowCount`` / ``WindowSum``: rows (optionally those matching ``where``) counted, or a
  column summed, in the hopping windows (``window``, ``hop``; tumbling when ``hop`` is the
  window) that hold the current row; fires when any reaches ``at_least``;
- ``Burst``: among rows matching ``where`` within ``window`` of the current row (either
  side in event time), some span of ``window`` holds ``at_least`` of them; only a row that
  matches ``where`` can fire it (card testing: many tiny charges);
- ``Travel``: the implied speed between the row and its neighbour in event time (either
  side: rows may arrive out of order) exceeds ``above_kmh``;
- ``AboveProfile``: a value exceeds both ``mean + sigmas * std`` and ``factor * mean`` of
  the key's profile (profile rows flow through the same stream, see ``Profile``).

Every rule has a ``weight`` (alert score = 1 - prod(1 - weight)) and a cool-down: a rule that
fired for a key stays quiet for that key for ``cooldown`` of event time (either direction).
A key keeps ``keep`` of event time behind its newest row; a row id seen before raises
nothing (replayed input). Predicates (``where``, ``when``, ``Profile.when``) are Spark SQL
expressions (a ``Column`` or a SQL string): Spark evaluates them, compiled, before the rule
operator. ``compile_spec`` turns a ``RuleSet`` into the JSON the JVM operator
(``io.headrace.realtime.RuleProcessor``) runs; ``headrace.realtime.operator`` applies it.
Nothing here starts Spark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from headrace.realtime.errors import RuleError
from headrace.streaming.errors import SpecError
from headrace.streaming.timeutil import duration_ms

Duration = str | int
Predicate = Column | str


def _ms(value: Duration, what: str) -> int:
    try:
        return duration_ms(value)
    except SpecError as e:
        raise RuleError(f"{what}: {e}") from e


def predicate(value: Predicate) -> Column:
    """A predicate as a Spark ``Column`` (SQL strings go through ``F.expr``)."""
    return F.expr(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class _Rule:
    name: str
    weight: float = 0.5
    cooldown: Duration | None = None
    """None: the rule set's cool-down."""
    when: Predicate | None = field(default=None, compare=False)
    """Only a row matching this can fire the rule (None: every row)."""

    def _check(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise RuleError(f"rule name {self.name!r}: use letters, digits and _")
        if not 0.0 < self.weight < 1.0:
            raise RuleError(f"rule {self.name}: weight must be in (0, 1), not {self.weight}")

    def _spec(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class WindowCount(_Rule):
    window: Duration = "5 minutes"
    at_least: float = 1
    hop: Duration | None = None
    where: Predicate | None = field(default=None, compare=False)

    def _spec(self) -> dict[str, Any]:
        window = _ms(self.window, f"rule {self.name} window")
        hop = window if self.hop is None else _ms(self.hop, f"rule {self.name} hop")
        if not 0 < hop <= window:
            raise RuleError(f"rule {self.name}: need 0 < hop <= window")
        if self.at_least <= 0:
            raise RuleError(f"rule {self.name}: at_least must be positive")
        return {"type": "window", "agg": "count", "window_ms": window, "hop_ms": hop,
                "at_least": self.at_least}


@dataclass(frozen=True)
class WindowSum(WindowCount):
    of: str = ""
    """The numeric column summed."""

    def _spec(self) -> dict[str, Any]:
        if not self.of:
            raise RuleError(f"rule {self.name}: WindowSum needs of=<column>")
        return {**super()._spec(), "agg": "sum", "field": self.of}


@dataclass(frozen=True)
class Burst(_Rule):
    window: Duration = "5 minutes"
    at_least: int = 5
    where: Predicate | None = field(default=None, compare=False)

    def _spec(self) -> dict[str, Any]:
        if self.at_least < 1:
            raise RuleError(f"rule {self.name}: at_least must be at least 1")
        return {"type": "burst", "window_ms": _ms(self.window, f"rule {self.name} window"),
                "at_least": self.at_least}


@dataclass(frozen=True)
class Travel(_Rule):
    above_kmh: float = 1000.0
    lat: str = "lat"
    lon: str = "lon"

    def _spec(self) -> dict[str, Any]:
        if self.above_kmh <= 0:
            raise RuleError(f"rule {self.name}: above_kmh must be positive")
        return {"type": "speed", "field": self.lat, "field2": self.lon,
                "above": self.above_kmh}


@dataclass(frozen=True)
class AboveProfile(_Rule):
    value: str = "amount"
    mean: str = "avg_amount"
    std: str = "std_amount"
    sigmas: float = 6.0
    factor: float = 5.0

    def _spec(self) -> dict[str, Any]:
        return {"type": "profile_outlier", "field": self.value, "mean": self.mean,
                "std": self.std, "above": self.sigmas, "factor": self.factor}


Rule = WindowCount | WindowSum | Burst | Travel | AboveProfile


@dataclass(frozen=True)
class Profile:
    """Rows matching ``when`` are profile rows, not events: they set the key's profile
    (``fields``, the latest by ``time``, epoch ms) that ``AboveProfile`` reads."""

    when: Predicate = field(compare=False)
    time: str = "updated_at"
    fields: tuple[str, ...] = ("avg_amount", "std_amount")


@dataclass(frozen=True)
class RuleSet:
    """Rules over a stream keyed by ``key``; ``id`` names a row (dedup of replays);
    ``event_time`` is epoch ms (long) or a timestamp column. ``carry`` columns are copied
    from the row that fired into the output. ``state_ttl`` bounds an idle key's state in
    processing time (0: never expires; event-time pruning by ``keep`` applies anyway).
    ``passthrough``: rows matching it are not evaluated and leave the operator as they came
    (no reasons, score 0, the carry columns): the way to take rows the rules must not see
    (dead letters) to the same sink, since Real-Time Mode allows no union after a stateful
    operator."""

    rules: tuple[Rule, ...]
    key: str
    id: str
    event_time: str
    cooldown: Duration = "10 minutes"
    keep: Duration = "15 minutes"
    carry: tuple[str, ...] = ()
    profile: Profile | None = None
    state_ttl: Duration = "1 hour"
    passthrough: Predicate | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.rules:
            raise RuleError("a RuleSet needs at least one rule")
        names = [r.name for r in self.rules]
        if len(set(names)) != len(names):
            raise RuleError(f"rule names must be unique: {names}")
        for r in self.rules:
            r._check()
            if isinstance(r, AboveProfile) and self.profile is None:
                raise RuleError(f"rule {r.name} reads a profile: give RuleSet(profile=...)")


def flag_column(rule: str, which: str) -> str:
    """The hidden boolean column holding a rule's ``where``/``when`` predicate."""
    return f"__{which}_{rule}"


def compile_spec(rules: RuleSet, *, kind: str, time: str) -> str:
    """The JSON spec of ``rules`` for the JVM operator, over input columns named ``kind``
    ("event" or "profile") and ``time`` (epoch ms) besides the rule set's own. Raises
    ``RuleError`` for a rule that cannot compile."""
    fields: list[str] = []
    flags: list[str] = []

    def need(name: str) -> str:
        if name not in fields:
            fields.append(name)
        return name

    specs = []
    default_cooldown = _ms(rules.cooldown, "cooldown")
    for r in rules.rules:
        spec: dict[str, Any] = {"name": r.name, "weight": r.weight, **r._spec()}
        spec["cooldown_ms"] = (default_cooldown if r.cooldown is None
                               else _ms(r.cooldown, f"rule {r.name} cooldown"))
        for key in ("field", "field2"):
            if key in spec:
                need(spec[key])
        if getattr(r, "where", None) is not None:
            spec["where"] = flag_column(r.name, "where")
            flags.append(spec["where"])
        if r.when is not None:
            spec["when"] = flag_column(r.name, "when")
            flags.append(spec["when"])
        specs.append(spec)
    profile_time = None
    if isinstance(rules.profile, Profile):
        profile, profile_time = list(rules.profile.fields), rules.profile.time
        for spec in specs:
            for key in ("mean", "std"):
                if key in spec and spec[key] not in profile:
                    raise RuleError(f"rule {spec['name']}: {spec[key]} is not a profile field")
    else:
        profile = []
    return json.dumps({
        "key": rules.key, "kind": kind, "id": rules.id, "time": time, "fields": fields,
        "flags": flags, "profile": profile, "profile_time": profile_time,
        "carry": list(rules.carry),
        "keep_ms": _ms(rules.keep, "keep"), "state_ttl_ms": _ms(rules.state_ttl, "state_ttl"),
        "rules": specs,
    }, sort_keys=True)
