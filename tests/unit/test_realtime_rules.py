"""The rule API compiles to the JVM operator's spec, and refuses what cannot run."""

from __future__ import annotations

import json

import pytest

from headrace.realtime import (
    AboveProfile,
    Burst,
    Profile,
    RuleError,
    RuleSet,
    Travel,
    WindowCount,
    WindowSum,
    compile_spec,
)


def rule_set(*rules: object, **kw: object) -> RuleSet:
    return RuleSet(rules=rules, key="card", id="id", event_time="t", **kw)  # type: ignore[arg-type]


def test_spec_names_every_column_and_flag() -> None:
    rules = rule_set(
        WindowCount("velocity", window="5 minutes", hop="1 minute", at_least=5, weight=0.7),
        Burst("tiny", window="5 min", at_least=5, where="amount < 2"),
        Travel("travel", above_kmh=900),
        AboveProfile("outlier", sigmas=6, factor=5, when="amount > 0"),
        WindowSum("spend", of="amount", window="1 hour", at_least=1000),
        cooldown="10 minutes", keep="15 minutes", carry=("user",),
        profile=Profile(when="topic = 'profiles'"))
    spec = json.loads(compile_spec(rules, kind="k", time="ms"))
    assert spec["fields"] == ["lat", "lon", "amount"]
    assert spec["flags"] == ["__where_tiny", "__when_outlier"]
    assert spec["profile"] == ["avg_amount", "std_amount"]
    assert (spec["keep_ms"], spec["kind"], spec["time"]) == (900_000, "k", "ms")
    by_name = {r["name"]: r for r in spec["rules"]}
    assert by_name["velocity"] == {
        "name": "velocity", "type": "window", "agg": "count", "window_ms": 300_000,
        "hop_ms": 60_000, "at_least": 5, "weight": 0.7, "cooldown_ms": 600_000}
    assert by_name["tiny"]["where"] == "__where_tiny"
    assert by_name["spend"]["agg"] == "sum" and by_name["spend"]["hop_ms"] == 3_600_000
    assert [r["name"] for r in spec["rules"]] == ["velocity", "tiny", "travel", "outlier",
                                                  "spend"]


@pytest.mark.parametrize(("make", "message"), [
    (lambda: rule_set(), "at least one rule"),
    (lambda: rule_set(WindowCount("a"), WindowCount("a")), "unique"),
    (lambda: rule_set(WindowCount("bad name")), "letters"),
    (lambda: rule_set(WindowCount("w", weight=1.0)), "weight"),
    (lambda: rule_set(AboveProfile("p")), "profile"),
])
def test_bad_rule_sets_are_refused(make: object, message: str) -> None:
    with pytest.raises(RuleError, match=message):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(("rule", "message"), [
    (WindowCount("w", window="1 minute", hop="2 minutes"), "hop"),
    (WindowCount("w", window="a while"), "duration"),
    (WindowCount("w", at_least=0), "at_least"),
    (WindowSum("s"), "of="),
    (Burst("b", at_least=0), "at_least"),
    (Travel("t", above_kmh=0), "above_kmh"),
])
def test_bad_rules_are_refused_when_compiled(rule: object, message: str) -> None:
    with pytest.raises(RuleError, match=message):
        compile_spec(rule_set(rule), kind="k", time="t")


def test_profile_fields_must_be_declared() -> None:
    rules = rule_set(AboveProfile("p", mean="m"), profile=Profile(when="true"))
    with pytest.raises(RuleError, match="not a profile field"):
        compile_spec(rules, kind="k", time="t")
