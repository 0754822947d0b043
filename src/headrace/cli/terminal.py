"""Consoles, option types and table helpers shared by the CLI's command modules.

Human-facing output goes through ``stdout``/``stderr`` (rich; plain text when not a
terminal). Record data (``headrace consume``) bypasses rich and is written as raw bytes.
Helpers here take plain text and escape rich markup themselves.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import Annotated, TextIO

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from headrace.ops.clients import BOOTSTRAP_ENV_VAR, add_client_settings, parse_client_settings

# Piped output is as wide as a table needs (up to this, or a wider $COLUMNS), not wrapped
# at rich's default of 80 columns nor at an inherited narrower $COLUMNS: long ids (group
# member ids) and status lines stay on one line for grep and awk.
_PIPE_WIDTH = 250


def _width(stream: TextIO) -> int | None:
    """None (rich's choice: the terminal's width, or $COLUMNS) on a terminal; piped, the
    wider of ``_PIPE_WIDTH`` and $COLUMNS."""
    if stream.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return max(_PIPE_WIDTH, int(columns)) if columns.isdigit() else _PIPE_WIDTH


stdout = Console(highlight=False, width=_width(sys.stdout))
stderr = Console(stderr=True, highlight=False, width=_width(sys.stderr))

NamesOnly = Annotated[
    bool, typer.Option("--names-only", "-q", help="Print bare names (ids), one per line.")
]
BootstrapServers = Annotated[
    str,
    typer.Option(
        "--bootstrap-servers",
        "-b",
        envvar=BOOTSTRAP_ENV_VAR,
        help="Comma-separated host:port list of brokers to bootstrap from.",
        show_envvar=True,
    ),
]



def _add_client_settings(values: list[str] | None) -> list[str] | None:
    """A subcommand's ``-X``: added to the process's client settings (``headrace -X``
    and ``--command-config`` ones), winning over them. Parsed before the command runs."""
    if values:
        try:
            add_client_settings(parse_client_settings(values))
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="'--client-config'") from e
    return values


# Every command that talks to a broker takes it, as ``headrace -X`` before the command.
ClientConfig = Annotated[
    list[str] | None,
    typer.Option(
        "--client-config", "-X", metavar="KEY=VALUE", callback=_add_client_settings,
        help="A Kafka client setting by librdkafka's name (security.protocol=SSL, "
        "sasl.username=...); repeatable; also accepted before the command.",
    ),
]


def print_error(message: str) -> None:
    """Print ``message`` on stderr as an error line (no markup interpretation)."""
    stderr.print(f"[bold red]error:[/bold red] {escape(message)}", soft_wrap=True)


def plural(n: int, noun: str) -> str:
    """``1 record``, ``2 records``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def print_listing(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, names_only: bool, empty: str
) -> None:
    """Print the result of a ``list`` command: ``rows`` as a table under ``headers``; with
    ``names_only`` each row's first cell alone, one per line and unstyled (for scripts);
    ``empty`` (e.g. "No topics.") instead of a table without rows."""
    if names_only:
        for row in rows:
            typer.echo(row[0])
        return
    if not rows:
        stdout.print(empty)
        return
    table = Table(*headers)
    for row in rows:
        table.add_row(*map(escape, row))
    stdout.print(table)


def dash(value: int | None) -> str:
    """``str(value)``, or "-" for a value that is not known."""
    return "-" if value is None else str(value)


def topic_partitions(partitions: Iterable[tuple[str, int]]) -> str:
    """``orders:0,2 payments:1`` (topics by name, partitions by id), or "-" if none."""
    by_topic: dict[str, set[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, set()).add(partition)
    text = " ".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items()))
    return text or "-"
