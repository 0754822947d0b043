"""``headrace bank ...``: seed 003's bank account, event-sourced on the log, one command at a
time (``headrace demo bank`` runs a whole scenario)."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Annotated

import typer

from headrace.cli.terminal import BootstrapServers, ClientConfig, stdout
from headrace.ops.clients import DEFAULT_BOOTSTRAP_SERVERS, client_settings

if TYPE_CHECKING:
    from headrace.eventsourcing import Repository
    from headrace.pipelines.bank.domain import Account

app = typer.Typer(name="bank", no_args_is_help=True,
                  help="Bank accounts event-sourced on the log (seed 003).")

Topic = Annotated[str, typer.Option(help="Event topic of the accounts.")]
CommandId = Annotated[str, typer.Option(
    "--command-id", help="Idempotence key: a command sent again with it applies once.")]
Cents = Annotated[int, typer.Argument(min=1, help="Amount in cents.")]


@contextlib.contextmanager
def _accounts(bootstrap_servers: str, topic: str) -> Iterator[Repository[Account]]:
    from headrace.eventsourcing import EventStore, Repository
    from headrace.pipelines.bank.domain import Account, bank_events

    with EventStore(bootstrap_servers, topic, bank_events,
                    client_config=client_settings()) as store:
        yield Repository(store, Account, snapshot_every=100)


def _show(account: Account) -> None:
    when = (dt.datetime.fromtimestamp(account.recorded_at / 1000, dt.UTC)
            if account.recorded_at else None)
    stdout.print(f"{account.id}: {account.balance / 100:,.2f} EUR, owner {account.owner or '-'}, "
                 f"version {account.version}"
                 + (f", last event {when.isoformat(timespec='milliseconds')}" if when else ""))


def _run(bootstrap_servers: str, topic: str, account: str, command: str, command_id: str,
         **kwargs: object) -> None:
    from headrace.pipelines.bank.domain import Account

    with _accounts(bootstrap_servers, topic) as repo:
        decide = partial(getattr(Account, command), **kwargs)
        agg, _result = repo.execute(account, decide, command_id=command_id or None,
                                    retries=10)
        _show(agg)


@app.command("open")
def open_command(account: str, owner: str, topic: Topic = "bank.events",
                 bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
                 client_config: ClientConfig = None,
                 command_id: CommandId = "") -> None:
    """Open ACCOUNT for OWNER."""
    _run(bootstrap_servers, topic, account, "open", command_id, owner=owner)


@app.command("deposit")
def deposit_command(account: str, cents: Cents, reference: str = "",
                    topic: Topic = "bank.events",
                    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
                    client_config: ClientConfig = None,
                    command_id: CommandId = "") -> None:
    """Deposit CENTS into ACCOUNT."""
    _run(bootstrap_servers, topic, account, "deposit", command_id, amount=cents,
         reference=reference)


@app.command("withdraw")
def withdraw_command(account: str, cents: Cents, reference: str = "",
                     topic: Topic = "bank.events",
                     bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
                     client_config: ClientConfig = None,
                     command_id: CommandId = "") -> None:
    """Withdraw CENTS from ACCOUNT (refused if it would overdraw)."""
    _run(bootstrap_servers, topic, account, "withdraw", command_id, amount=cents,
         reference=reference)


@app.command("transfer")
def transfer_command(source: str, target: str, cents: Cents,
                     transfer_id: Annotated[str, typer.Option(
                         "--id", help="Transfer id: the same id never moves money twice.")],
                     topic: Topic = "bank.events",
                     bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
                     client_config: ClientConfig = None) -> None:
    """Move CENTS from SOURCE to TARGET (a saga of idempotent commands)."""
    from headrace.pipelines.bank.domain import transfer

    with _accounts(bootstrap_servers, topic) as repo:
        done = transfer(repo, source, target, cents, transfer_id)
        if not done:
            stdout.print(f"{target} refused the transfer; {source} was refunded")
        for name in (source, target):
            _show(repo.load(name))


@app.command("balance")
def balance_command(account: str,
                    at: Annotated[str, typer.Option(
                        help="As of this time (ISO 8601, UTC if no offset): time travel.")] = "",
                    version: Annotated[int | None, typer.Option(
                        min=0, help="As of this version.")] = None,
                    topic: Topic = "bank.events",
                    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
                    client_config: ClientConfig = None) -> None:
    """Show ACCOUNT's balance, now or as of a time or version."""
    when = None
    if at:
        try:
            when = dt.datetime.fromisoformat(at)
        except ValueError as e:
            raise typer.BadParameter(f"not an ISO 8601 time: {at!r}", param_hint="'--at'") from e
    with _accounts(bootstrap_servers, topic) as repo:
        _show(repo.load(account, at=when, version=version))
