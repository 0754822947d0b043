"""``headrace registry`` (run one) and ``headrace schemas ...`` (a thin client of its API)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from headrace.cli.terminal import BootstrapServers, ClientConfig, stdout
from headrace.ops.clients import DEFAULT_BOOTSTRAP_SERVERS, client_settings
from headrace.ops.errors import InvalidInputError

REGISTRY_ENV_VAR = "HEADRACE_SCHEMA_REGISTRY"
DEFAULT_REGISTRY_URL = "http://127.0.0.1:8081"

RegistryUrl = Annotated[
    str, typer.Option("--registry", "-r", envvar=REGISTRY_ENV_VAR, show_envvar=True,
                      help="URL of the schema registry.")]
SchemaType = Annotated[
    str, typer.Option("--type", "-t", help="AVRO, JSON or PROTOBUF.", case_sensitive=False)]

app = typer.Typer(
    name="schemas",
    help="List, read, register, check and delete schemas in a schema registry.",
    no_args_is_help=True,
)


def registry(
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535,
                                      help="HTTP port; 0 picks a free one.")] = 8081,
    topic: Annotated[str, typer.Option(help="Compacted topic holding the schemas.")] = "_schemas",
    group: Annotated[str, typer.Option(
        help="Registry cluster name: instances sharing it (and the topic) share one writer "
             "identity, the transactional id GROUP-TOPIC.")] = "headrace-schema-registry",
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING.")] = "WARNING",
) -> None:
    """Run a Confluent-compatible schema registry storing everything in TOPIC. Blocks until
    Ctrl-C (SIGINT) or SIGTERM."""
    from headrace.registry.server import RegistryConfig, run

    run(RegistryConfig(bootstrap_servers, host, port, topic, group,
                       client_config=client_settings()), log_level.upper())


def spawn_registry(bootstrap_servers: str, host: str, port: int) -> subprocess.Popen[bytes]:
    """Start ``headrace registry`` as a child process (for ``headrace broker
    --schema-registry-port``); its output goes to ours. Returns the Popen handle."""
    return subprocess.Popen([sys.executable, "-m", "headrace", "registry",
                             "--bootstrap-servers", bootstrap_servers,
                             "--host", host, "--port", str(port)],
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))


def _schema_text(source: str) -> str:
    """A schema given inline or as @FILE (or - for stdin)."""
    if source == "-":
        return sys.stdin.read()
    if source.startswith("@"):
        path = Path(source[1:])
        try:
            return path.read_text()
        except OSError as e:
            raise InvalidInputError(f"cannot read {path}: {e.strerror}") from e
    return source


def _print_json(value: object) -> None:
    stdout.print(escape(json.dumps(value, indent=2)), soft_wrap=True)


@app.command("list")
def list_subjects(
    deleted: Annotated[bool, typer.Option(help="Include soft-deleted subjects.")] = False,
    url: RegistryUrl = DEFAULT_REGISTRY_URL,
) -> None:
    """List subjects with their versions."""
    from headrace.registry.client import RegistryClient

    client = RegistryClient(url)
    for subject in client.subjects(deleted):
        versions = client.versions(subject, deleted)
        stdout.print(f"{escape(subject)}  versions {','.join(str(v) for v in versions)}",
                     soft_wrap=True)


@app.command("get")
def get(
    subject: Annotated[str | None, typer.Argument(help="Subject (or use --id).")] = None,
    version: Annotated[str, typer.Option(help="Version number or latest.")] = "latest",
    schema_id: Annotated[int | None, typer.Option("--id", help="Get by schema id.")] = None,
    url: RegistryUrl = DEFAULT_REGISTRY_URL,
) -> None:
    """Print a schema version (subject, version, id, schema) as JSON."""
    from headrace.registry.client import RegistryClient

    client = RegistryClient(url)
    if schema_id is not None:
        _print_json(client.by_id(schema_id))
    elif subject is None:
        raise typer.BadParameter("give a SUBJECT or --id")
    else:
        _print_json(client.version(subject, version))


@app.command("register")
def register(
    subject: Annotated[str, typer.Argument(help="Subject to register under.")],
    schema: Annotated[str, typer.Argument(help="Schema text, @FILE, or - for stdin.")],
    schema_type: SchemaType = "AVRO",
    normalize: Annotated[bool, typer.Option(help="Normalize before comparing.")] = False,
    url: RegistryUrl = DEFAULT_REGISTRY_URL,
) -> None:
    """Register a schema; prints its id and version (an existing one if identical)."""
    from headrace.registry.client import RegistryClient

    found = RegistryClient(url).register(subject, _schema_text(schema), schema_type.upper(),
                                         normalize=normalize)
    stdout.print(f"{escape(subject)} version {found.get('version')}: id {found['id']}")


@app.command("check")
def check(
    subject: Annotated[str, typer.Argument(help="Subject to check against.")],
    schema: Annotated[str, typer.Argument(help="Schema text, @FILE, or - for stdin.")],
    schema_type: SchemaType = "AVRO",
    version: Annotated[str | None, typer.Option(
        help="Check against this version only (default: as the subject's level says).")] = None,
    url: RegistryUrl = DEFAULT_REGISTRY_URL,
) -> None:
    """Check a schema against a subject's compatibility level; exit 1 if incompatible."""
    from headrace.ops.errors import VerificationError
    from headrace.registry.client import RegistryClient

    answer = RegistryClient(url).check(subject, _schema_text(schema), schema_type.upper(),
                                       version)
    if answer.get("is_compatible"):
        stdout.print("compatible")
        return
    messages = answer.get("messages") or []
    raise VerificationError("incompatible:\n  " + "\n  ".join(str(m) for m in messages))


@app.command("config")
def config(
    subject: Annotated[str | None, typer.Argument(help="Subject (default: global).")] = None,
    level: Annotated[str | None, typer.Option(
        "--set", help="Set the compatibility level (BACKWARD, FULL_TRANSITIVE, NONE, ...).")] = None,
    url: RegistryUrl = DEFAULT_REGISTRY_URL,
) -> None:
    """Show or set a compatibility level."""
    from headrace.registry.client import RegistryClient

    answer = RegistryClient(url).config(subject, level.upper() if level else None)
    stdout.print(str(answer.get("compatibilityLevel") or answer.get("compatibility")))


@app.command("delete")
def delete(
    subject: Annotated[str, typer.Argument(help="Subject to delete.")],
    version: Annotated[str | None, typer.Option(help="Only this version.")] = None,
    permanent: Annotated[bool, typer.Option(
        help="Delete for good (after a soft delete).")] = False,
    url: RegistryUrl = DEFAULT_REGISTRY_URL,
) -> None:
    """Soft-delete a subject (or one version); --permanent afterwards removes it for good."""
    from headrace.registry.client import RegistryClient

    gone = RegistryClient(url).delete(subject, version, permanent)
    what = "permanently deleted" if permanent else "soft-deleted"
    stdout.print(f"{escape(subject)}: {what} version(s) {gone}")
