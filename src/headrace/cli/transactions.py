"""``headrace transactions ...``: the Typer sub-application over ``headrace.ops.transactions``."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated

import typer
from rich.console import Group as Lines
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from headrace.cli.terminal import (
    BootstrapServers,
    ClientConfig,
    NamesOnly,
    print_listing,
    stdout,
    topic_partitions,
)
from headrace.ops.clients import DEFAULT_BOOTSTRAP_SERVERS
from headrace.ops.transactions import TransactionAdmin, TransactionDescription, TxnState

app = typer.Typer(
    name="transactions",
    help="List and describe the transactions of transactional producers.",
    no_args_is_help=True,
)


@app.command("list")
def list_transactions(
    state: Annotated[
        list[TxnState] | None,
        typer.Option(
            "--state",
            "-s",
            case_sensitive=False,
            help="Only transactions in this state, e.g. Ongoing (any case; repeatable).",
        ),
    ] = None,
    producer_id: Annotated[
        list[int] | None,
        typer.Option(
            "--producer-id", min=0, metavar="N", help="Only this producer id (repeatable)."
        ),
    ] = None,
    min_duration_ms: Annotated[
        int | None,
        typer.Option(
            "--min-duration-ms",
            min=0,
            metavar="N",
            help="Only transactions running longer than N ms (brokers as of Kafka 3.8).",
        ),
    ] = None,
    names_only: NamesOnly = False,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """List transactional ids with their coordinator, producer id and state.

    Every broker is asked for the transactions it coordinates. Filters combine: a
    transaction is listed if it passes all of them.
    """
    found = TransactionAdmin(bootstrap_servers).list_transactions(
        states=[s.value for s in state or []],
        producer_ids=producer_id or [],
        min_duration_ms=min_duration_ms,
    )
    rows = [(t.transactional_id, str(t.coordinator), str(t.producer_id), t.state) for t in found]
    headers = ("Transactional id", "Coordinator", "Producer id", "State")
    print_listing(headers, rows, names_only=names_only, empty="No transactions.")


@app.command("describe")
def describe(
    transactional_id: Annotated[
        str,
        typer.Argument(
            help="The producer's transactional.id.", metavar="TRANSACTIONAL_ID", show_default=False
        ),
    ],
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """Show a transactional id's state, producer id and epoch, timeout, start time and the
    partitions in its transaction, as its coordinator reports them."""
    stdout.print(_render(TransactionAdmin(bootstrap_servers).describe(transactional_id)))


def _render(t: TransactionDescription) -> Lines:
    header = Text.assemble("Transactional id ", (t.transactional_id, "bold"), f": {t.state}")
    facts = Table(show_header=False)
    facts.add_column(style="bold")
    facts.add_column()
    for name, value in (
        ("State", t.state),
        ("Producer id", str(t.producer_id)),
        ("Producer epoch", str(t.producer_epoch)),
        ("Timeout", f"{t.timeout_ms} ms"),
        ("Started", _started(t.start_time_ms)),
        ("Partitions", topic_partitions(t.partitions)),
        ("Coordinator", f"node {t.coordinator}"),
    ):
        facts.add_row(name, escape(value))
    return Lines(header, facts)


def _started(start_time_ms: int | None) -> str:
    """``2026-11-02T14:30:00.123+01:00 (4.2 s ago)`` in local time; "-" if unknown."""
    if start_time_ms is None:
        return "-"
    when = datetime.fromtimestamp(start_time_ms / 1000).astimezone()
    age = max(0.0, time.time() - start_time_ms / 1000)
    return f"{when.isoformat(timespec='milliseconds')} ({age:.1f} s ago)"
