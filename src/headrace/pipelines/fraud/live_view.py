"""What ``headrace demo fraud`` shows: the live state, its terminal view and the summary.

``LiveState`` is written by the demo's threads and read by the view (GIL-consistent reads of
simple fields). Latency is "detection latency": the time an alert became readable to a
read_committed consumer minus its transaction's event time.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.table import Table

from headrace.pipelines.fraud.truth import GroundTruth, Score

Key = tuple[str, str]
"""An alert's identity for comparing paths: (card id, rule)."""

BUCKETS_MS = (25, 50, 100, 200, 500, 1000, 2000, 5000)
BAR = 40


@dataclass
class LiveState:
    sent: int = 0
    started: float = field(default_factory=time.monotonic)
    alerts: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=8))
    all_alerts: list[tuple[str, int, Any]] = field(default_factory=list)
    alert_ids: set[str] = field(default_factory=set)
    repeats: int = 0
    """Alerts read again with a transaction id already alerted (read_committed; 0 with the
    exactly-once sink)."""
    latencies_ms: list[int] = field(default_factory=list)
    stages_ms: list[tuple[int, int, int]] = field(default_factory=list)
    """Real-time alerts' latency by stage: event time to the transaction's record time
    (simulated network and the generator), record to alert record (Spark: source, operator,
    sink), alert record to read (broker and a read_committed consumer)."""
    checked: set[Key] = field(default_factory=set)
    """(card, rule) of the micro-batch path's alerts (the real-time engine's check)."""
    late: int = 0
    parsed: int = 0
    dead_letters: int = 0
    lag: int = 0
    processed_per_s: float = 0.0
    batches: int = 0
    truth: GroundTruth | None = None
    phase: str = "starting"
    stream_started: float = 0.0
    stream_ended: float = 0.0
    sent_before_stream: int = 0
    measure_from_ms: float = 0.0
    lag_samples: list[tuple[float, int]] = field(default_factory=list)
    warmup_ms: list[int] = field(default_factory=list)
    """Latency of each warm-up alert read (``live_warmup``: cards outside the run, before
    its measured traffic; in no other figure)."""

    def keys(self) -> set[Key]:
        return {(card, r) for card, _t, reasons in self.all_alerts for r in reasons}


@dataclass(frozen=True)
class LiveSummary:
    engine: str
    lag_samples: list[tuple[float, int]]
    events: int
    alerts: int
    score: Score
    p50_ms: int
    p99_ms: int
    p999_ms: int
    late: int
    expected_late: int
    dead_letters: int
    expected_dead_letters: int
    elapsed_s: float
    repeats: int = 0
    agreement: tuple[int, int, int] | None = None
    """(alerts of both paths, real-time only, micro-batch only), by (card, rule)."""
    latencies_ms: tuple[int, ...] = ()
    stages_ms: tuple[tuple[int, int, int], ...] = ()
    transactions: int = 0
    stream_s: float = 0.0
    """Wall time the generator took for the transactions (the duration if it kept up)."""
    profiles_topic: str = "user-profiles"
    data_dir: str | None = None
    """The embedded broker's data directory (kept after the demo), or None."""
    bootstrap_servers: str | None = None
    """The broker the demo ran against when given one (``--bootstrap-servers``), or None."""
    warmup_ms: tuple[int, ...] = ()
    """Latency of each warm-up alert (``live_warmup``), apart from every other figure."""

    def kept(self) -> str:
        """Where the demo's topics are and a command that reads them afterwards."""
        topics = (f"transactions, {self.profiles_topic}, fraud-alerts, transactions-late, "
                  "transactions-dlq")
        if self.bootstrap_servers is not None:
            return (f"topics kept on {self.bootstrap_servers}: {topics} (try: headrace "
                    f"consume fraud-alerts --from-beginning -b {self.bootstrap_servers})")
        if self.data_dir is not None:
            return (f"topics kept in {self.data_dir}: {topics} (the embedded broker has "
                    f"stopped; start one on them with: headrace broker --data-dir "
                    f"{self.data_dir}, then: headrace consume fraud-alerts --from-beginning)")
        return f"topics: {topics}"

    def render(self) -> str:
        s = self.score
        lines = [
            f"fraud demo ({self.engine}): {self.events} records in {self.elapsed_s:.0f} s, "
            f"{self.alerts} alerts",
            f"precision {s.precision:.3f}  recall {s.recall:.3f}  "
            f"({s.matched_incidents}/{s.incidents} incidents found)",
            f"detection latency p50 {self.p50_ms} ms  p99 {self.p99_ms} ms  "
            f"p99.9 {self.p999_ms} ms (event time to alert readable, read_committed)",
        ]
        if self.stages_ms:
            parts = [f"{name} {percentile([st[i] for st in self.stages_ms], 0.5)} / "
                     f"{percentile([st[i] for st in self.stages_ms], 0.99)} ms"
                     for i, name in enumerate(("event -> record (network, generator)",
                                               "record -> alert (Spark)",
                                               "alert -> read (broker, consumer)"))]
            lines.append("by stage, p50 / p99: " + ", ".join(parts))
        if self.agreement is not None:
            both, rt_only, mb_only = self.agreement
            lines.append(f"checked by the micro-batch path: {both} alerts in both, "
                         f"{rt_only} real-time only, {mb_only} micro-batch only")
        if self.warmup_ms:
            lines.append(f"warm-up before the measured traffic: {len(self.warmup_ms)} alerts "
                         f"on cards outside the run, {min(self.warmup_ms)}-"
                         f"{max(self.warmup_ms)} ms (in none of the figures above)")
        lines.append(f"alerts read (read_committed) {self.alerts + self.repeats}, distinct "
                     f"{self.alerts}" + (f" ({self.repeats} repeated)" if self.repeats
                                         else " (exactly once)"))
        lines += [
            f"late (side output) {self.late}  expected {self.expected_late}; "
            f"dead letters {self.dead_letters}  expected {self.expected_dead_letters}",
            self.kept(),
        ]
        return "\n".join(lines)


def percentile(values: list[int] | tuple[int, ...], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def histogram(latencies: list[int]) -> Table:
    """Detection latencies in fixed buckets, one bar per bucket."""
    counts = [0] * (len(BUCKETS_MS) + 1)
    for v in latencies:
        i = next((n for n, edge in enumerate(BUCKETS_MS) if v < edge), len(BUCKETS_MS))
        counts[i] += 1
    top = max(counts) or 1
    t = Table(title="detection latency", show_header=False, box=None)
    labels = [f"< {e} ms" for e in BUCKETS_MS] + [f">= {BUCKETS_MS[-1]} ms"]
    for label, n in zip(labels, counts, strict=True):
        t.add_row(label, "#" * round(BAR * n / top), str(n))
    return t


def view(state: LiveState, engine: str, rate: float) -> Group:
    streaming = ((state.stream_ended or time.monotonic()) - state.stream_started
                 if state.stream_started else 0.0)
    pace = (state.sent - state.sent_before_stream) / streaming if streaming > 0.5 else 0.0
    stats = Table(title=f"headrace fraud detection ({engine}) - {state.phase}",
                  show_header=False)
    score = state.truth.score(state.all_alerts) if state.truth else None
    rows = [
        ("events in", f"{state.sent} ({pace:.0f}/s while streaming, target {rate:g}/s)"),
        ("micro-batch path" if engine == "realtime" else "pipeline",
         f"{state.parsed} transactions parsed, {state.processed_per_s:.0f} rows/s "
         f"in the last batch, {state.batches} batches, lag {state.lag}"),
        ("alerts", str(len(state.all_alerts))),
        ("detection latency", f"p50 {percentile(state.latencies_ms, 0.5)} ms, "
                              f"p99 {percentile(state.latencies_ms, 0.99)} ms"),
        ("precision / recall", f"{score.precision:.3f} / {score.recall:.3f}" if score
         else "-"),
        ("late / dead letters", f"{state.late} / {state.dead_letters}"),
    ]
    if engine == "realtime":
        mine = state.keys()
        rows.append(("checked by micro-batch",
                     f"{len(mine & state.checked)} of {len(mine)} alerts so far"))
    for k, v in rows:
        stats.add_row(k, v)
    alerts = Table(title="latest alerts", show_lines=False)
    for col in ("card", "amount", "city", "reasons", "score"):
        alerts.add_column(col)
    for a in list(state.alerts):
        alerts.add_row(a["card_id"], f"{a['amount']:.2f}", a["city"], ", ".join(a["reasons"]),
                       f"{a['score']:.2f}")
    return Group(stats, histogram(list(state.latencies_ms)), alerts)
