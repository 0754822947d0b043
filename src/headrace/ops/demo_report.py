"""The result of ``headrace demo`` and its rendering for the terminal."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table


@dataclass(frozen=True)
class Check:
    """One verification: what was checked, whether it held, and the evidence."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class DemoReport:
    """What the demo did and measured. Durations are wall-clock seconds."""

    broker: str
    topic: str
    partitions: int
    produced: int
    consumed: int
    cards: int
    payload_bytes: int
    per_partition: Mapping[int, int]
    startup_seconds: float | None
    produce_seconds: float
    consume_seconds: float
    total_seconds: float
    checks: tuple[Check, ...]

    @property
    def problems(self) -> list[str]:
        return [c.detail for c in self.checks if not c.ok]


def render_report(report: DemoReport) -> Panel:
    """A compact summary of ``report`` for the terminal."""
    mb = report.payload_bytes / 1e6
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    startup = f" (started in {report.startup_seconds:.1f} s)" if report.startup_seconds else ""
    facts.add_row("Broker", escape(report.broker) + startup)
    spread = ", ".join(f"{p}: {n}" for p, n in report.per_partition.items())
    facts.add_row("Topic", f"{escape(report.topic)}, {report.partitions} partitions ({spread})")
    facts.add_row(
        "Records",
        f"{report.produced} produced, {report.consumed} consumed, keyed by {report.cards} cards",
    )
    facts.add_row("Payload", f"{mb:.2f} MB of keys and JSON values")
    facts.add_row("Produce", _rate(report.produced, report.payload_bytes, report.produce_seconds))
    facts.add_row("Consume", _rate(report.consumed, report.payload_bytes, report.consume_seconds))
    facts.add_row("Total time", f"{report.total_seconds:.2f} s")
    checks = Table.grid(padding=(0, 1))
    for check in report.checks:
        mark = "[green]✓[/green]" if check.ok else "[bold red]✗[/bold red]"
        checks.add_row(mark, escape(check.detail))
    title = "headrace demo: card payments" + (
        " [green]OK[/green]" if not report.problems else " [bold red]FAILED[/bold red]"
    )
    return Panel(Group(facts, "", checks), title=title, title_align="left", expand=False)


def _rate(records: int, payload_bytes: int, seconds: float) -> str:
    seconds = max(seconds, 1e-9)
    return (
        f"{seconds:.2f} s, {records / seconds:,.0f} records/s, "
        f"{payload_bytes / seconds / 1e6:.1f} MB/s"
    )
