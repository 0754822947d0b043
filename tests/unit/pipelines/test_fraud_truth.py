"""GroundTruth: scoring arithmetic on hand-made alerts, JSON round trips."""

from __future__ import annotations

import pytest

from headrace.pipelines.fraud.truth import GroundTruth, Incident, TruthError

T = 1_000_000_000


def _truth(partial: tuple[Incident, ...] = ()) -> GroundTruth:
    incidents = (
        Incident("c1", "u1", "velocity", T, T + 120_000, ("a", "b", "c", "d", "e", "f")),
        Incident("c2", "u2", "impossible_travel", T, T + 60_000, ("g", "h")),
        Incident("c3", "u3", "amount_anomaly", T + 5_000, T + 5_000, ("i",)),
        Incident("c4", "u4", "card_testing", T, T + 90_000, ("j", "k", "l", "m", "n")),
    )
    return GroundTruth(seed=1, start_ms=T, end_ms=T + 600_000, incidents=incidents,
                       total_txns=100, malformed_count=2, malformed_txn_ids=("x", "y"),
                       late_count=3, profile_records=10, users=4, partial_incidents=partial,
                       guarantees={"normal_min_gap_ms": 80_000})


def test_score_counts_matched_alerts_and_found_incidents() -> None:
    truth = _truth()
    alerts = [
        ("c1", T + 50_000, ["velocity"]),          # match
        ("c1", T + 120_000 + 300_000, "velocity"),  # last + 5 min: still a match
        ("c1", T + 120_000 + 300_001, "velocity"),  # just after: false positive
        ("c2", T - 1_000, ["travel"]),              # first - 1 s: match
        ("c3", T + 5_000 - 1_001, ["amount"]),      # just before: false positive
        ("c9", T, ["velocity"]),                    # unknown card: false positive
    ]
    score = truth.score(alerts)
    assert (score.alerts, score.matched_alerts) == (6, 3)
    assert score.precision == pytest.approx(0.5)
    assert (score.incidents, score.matched_incidents) == (4, 2)
    assert score.recall == pytest.approx(0.5)
    assert score.per_pattern_recall == {"velocity": 1.0, "impossible_travel": 1.0,
                                        "amount_anomaly": 0.0, "card_testing": 0.0}
    assert [a[0] for a in score.false_positives] == ["c1", "c3", "c9"]
    assert score.f1 == pytest.approx(0.5)


def test_score_edge_cases() -> None:
    truth = _truth()
    empty = truth.score([])
    assert (empty.precision, empty.recall, empty.alerts) == (1.0, 0.0, 0)
    perfect = truth.score([(i.card_id, i.last_event_ms, ()) for i in truth.incidents])
    assert (perfect.precision, perfect.recall, perfect.f1) == (1.0, 1.0, 1.0)
    twice = truth.score([("c1", T, ()), ("c1", T + 1, ())])
    assert (twice.matched_alerts, twice.matched_incidents) == (2, 1)
    nothing = GroundTruth(1, T, T, (), 0, 0, (), 0, 0, 0)
    assert nothing.score([]).recall == 1.0 and nothing.score([]).per_pattern_recall == {}
    assert nothing.score([("c1", T, ())]).precision == 0.0


def test_alerts_on_partial_incidents_are_ignored() -> None:
    cut = Incident("c5", "u5", "velocity", T, T + 100_000, ("p", "q"))
    score = _truth((cut,)).score([("c5", T + 1, ()), ("c1", T, ())])
    assert (score.alerts, score.ignored_alerts, score.precision) == (1, 1, 1.0)
    assert score.incidents == 4


def test_json_round_trip() -> None:
    truth = _truth((Incident("c5", "u5", "velocity", T, T + 1, ("p",)),))
    text = truth.to_json()
    assert GroundTruth.from_json(text) == truth
    assert GroundTruth.from_json(text.encode()) == truth


@pytest.mark.parametrize("text", ["", "[]", '{"seed": 1}', _truth().to_json().replace(
    '"velocity"', '"teleport"')])
def test_from_json_refuses_other_documents(text: str) -> None:
    with pytest.raises(TruthError):
        GroundTruth.from_json(text)
