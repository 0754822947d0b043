"""The fraud demo's closing hint (``LiveSummary.render``'s last line) names commands that
work after the demo: with the embedded broker gone, where its topics are and how to start a
broker on them; with ``--bootstrap-servers``, the broker the demo used."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from headrace.pipelines.fraud.live_view import LiveSummary
from headrace.pipelines.fraud.truth import Score
from headrace.testing import EmbeddedBroker
from tests.integration.test_cli import cli, ok


def summary(**where: str) -> LiveSummary:
    score = Score(precision=1.0, recall=1.0, per_pattern_recall={}, alerts=1, matched_alerts=1,
                  ignored_alerts=0, incidents=1, matched_incidents=1, false_positives=())
    return LiveSummary(engine="microbatch", lag_samples=[], events=1, alerts=1, score=score,
                       p50_ms=1, p99_ms=1, p999_ms=1, late=0, expected_late=0, dead_letters=0,
                       expected_dead_letters=0, elapsed_s=1.0, **where)  # type: ignore[arg-type]


def test_the_hint_after_an_embedded_run_works(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo-data"
    with EmbeddedBroker(data_dir=data_dir) as demo:  # the demo's broker, then gone
        ok(cli("produce", "fraud-alerts", servers=demo.bootstrap_servers, stdin="alert-1\n"))
    last = summary(data_dir=str(data_dir)).render().splitlines()[-1]
    found = re.search(r"with: (headrace broker .*), then: (headrace consume .*)\)$", last)
    assert found is not None, last
    start, read = (shlex.split(c) for c in found.groups())
    assert start == ["headrace", "broker", "--data-dir", str(data_dir)]
    # That command, on a free port instead of the default 9092 (EmbeddedBroker runs
    # ``headrace broker --port 0 --data-dir DIR``).
    with EmbeddedBroker(data_dir=data_dir) as broker:
        done = ok(cli(*read[1:], "-n", "1", servers=broker.bootstrap_servers))
    assert done.stdout.split() == ["alert-1"]


def test_the_hint_after_a_run_on_a_given_broker() -> None:
    last = summary(bootstrap_servers="kafka-1:9092").render().splitlines()[-1]
    assert last.endswith("(try: headrace consume fraud-alerts --from-beginning "
                         "-b kafka-1:9092)")
    assert "cannot" not in last and "topics kept on kafka-1:9092" in last
