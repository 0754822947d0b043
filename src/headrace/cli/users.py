"""``headrace users add|list|delete``: SCRAM users through the Kafka Admin API (KIP-554:
AlterUserScramCredentials / DescribeUserScramCredentials), on headrace or any Kafka."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from headrace.cli.terminal import BootstrapServers, ClientConfig, stdout
from headrace.ops.clients import (
    DEFAULT_BOOTSTRAP_SERVERS,
    REQUEST_TIMEOUT_S,
    client_settings,
)
from headrace.ops.errors import OpsError

app = typer.Typer(name="users", no_args_is_help=True,
                  help="SCRAM users of the cluster (KIP-554 Admin API).")
MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
              "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
Mechanism = Annotated[list[str] | None, typer.Option(
    "--mechanism", help="SCRAM-SHA-256 and/or SCRAM-SHA-512 (default: both).")]
PASSWORD_ENV = "HEADRACE_USER_PASSWORD"


def _mechanisms(names: list[str] | None) -> list[tuple[str, ScramMechanism]]:
    chosen = names or list(MECHANISMS)
    unknown = [n for n in chosen if n.upper() not in MECHANISMS]
    if unknown:
        raise typer.BadParameter(f"unknown mechanism {unknown[0]!r}: SCRAM-SHA-256 or "
                                 "SCRAM-SHA-512", param_hint="'--mechanism'")
    return [(n.upper(), MECHANISMS[n.upper()]) for n in chosen]


def admin_client(bootstrap_servers: str) -> AdminClient:
    """An admin client with the process's client settings (``-X`` included)."""
    return AdminClient({**client_settings(), "bootstrap.servers": bootstrap_servers,
                        "log_level": 3})


def _wait(futures: dict[str, Any], what: str) -> None:
    for user, future in futures.items():
        try:
            future.result(REQUEST_TIMEOUT_S)
        except KafkaException as e:
            raise OpsError(f"{what} {user!r}: {e.args[0].str()}") from e


@app.command("add")
def add(user: str,
        password: Annotated[str, typer.Option(
            envvar=PASSWORD_ENV, prompt=True, hide_input=True,
            help=f"The password (or ${PASSWORD_ENV}; prompted for when neither).")],
        mechanism: Mechanism = None,
        iterations: Annotated[int, typer.Option(min=4096, max=16384)] = 8192,
        bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
        client_config: ClientConfig = None) -> None:
    """Create USER or change its password (salted and hashed by the client; the broker
    never sees or stores the password)."""
    changes: list[Any] = [UserScramCredentialUpsertion(user, ScramCredentialInfo(m, iterations),
                                            password.encode(), os.urandom(32))
               for _name, m in _mechanisms(mechanism)]
    admin = admin_client(bootstrap_servers)  # kept alive until the answers came
    _wait(admin.alter_user_scram_credentials(changes), "cannot set the credentials of")
    stdout.print(f"{user}: {', '.join(n for n, _ in _mechanisms(mechanism))}")


@app.command("list")
def list_users(bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
               client_config: ClientConfig = None) -> None:
    """Users and their SCRAM mechanisms (never the keys)."""
    admin = admin_client(bootstrap_servers)
    future: Any = admin.describe_user_scram_credentials()
    try:
        found = future.result(REQUEST_TIMEOUT_S)
    except KafkaException as e:
        raise OpsError(f"cannot list users: {e.args[0].str()}") from e
    for user, desc in sorted(found.items()):
        infos = ", ".join(f"{i.mechanism.name.replace('_', '-')} ({i.iterations} iterations)"
                          for i in desc.scram_credential_infos)
        stdout.print(f"{user}: {infos}")


@app.command("delete")
def delete(user: str, mechanism: Mechanism = None,
           bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
           client_config: ClientConfig = None) -> None:
    """Delete USER's credentials (all mechanisms unless --mechanism)."""
    admin = admin_client(bootstrap_servers)
    chosen = _mechanisms(mechanism)
    if not mechanism:  # only what exists: deleting a missing one is an error
        try:
            futures: Any = admin.describe_user_scram_credentials([user])
            desc = futures[user].result(REQUEST_TIMEOUT_S)
        except KafkaException as e:
            raise OpsError(f"cannot delete {user!r}: {e.args[0].str()}") from e
        have = {i.mechanism for i in desc.scram_credential_infos}
        chosen = [(n, m) for n, m in chosen if m in have]
    deletions: list[Any] = [UserScramCredentialDeletion(user, m) for _n, m in chosen]
    _wait(admin.alter_user_scram_credentials(deletions), "cannot delete")
    stdout.print(f"deleted {user} ({', '.join(n for n, _ in chosen)})")
