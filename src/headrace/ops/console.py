"""Consoles and option types shared by the CLI's command modules.

Human-facing output goes through ``stdout``/``stderr`` (rich; plain text when not a
terminal). Record data (``headrace consume``) bypasses rich and is written as raw bytes.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, TextIO

import typer
from rich.console import Console
from rich.markup import escape

from headrace.ops.clients import BOOTSTRAP_ENV_VAR

# Piped output is as wide as a table needs (up to this), not wrapped at rich's default of
# 80 columns: long ids (group member ids) stay on one line for grep and awk.
_PIPE_WIDTH = 250


def _width(stream: TextIO) -> int | None:
    """None (rich's choice: the terminal's width, or $COLUMNS) unless piped."""
    if stream.isatty() or os.environ.get("COLUMNS"):
        return None
    return _PIPE_WIDTH


stdout = Console(highlight=False, width=_width(sys.stdout))
stderr = Console(stderr=True, highlight=False, width=_width(sys.stderr))

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


def print_error(message: str) -> None:
    """Print ``message`` on stderr as an error line (no markup interpretation)."""
    stderr.print(f"[bold red]error:[/bold red] {escape(message)}", soft_wrap=True)


def plural(n: int, noun: str) -> str:
    """``1 record``, ``2 records``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
