"""``headrace topics ...``: the Typer sub-application over ``headrace.ops.topics``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from headrace.cli.terminal import (
    BootstrapServers,
    ClientConfig,
    NamesOnly,
    plural,
    print_listing,
    stdout,
)
from headrace.ops.clients import DEFAULT_BOOTSTRAP_SERVERS
from headrace.ops.topics import TopicAdmin, TopicDescription, parse_configs

app = typer.Typer(
    name="topics",
    help="Create, list, describe, alter the configs of and delete topics.",
    no_args_is_help=True,
)

TopicName = Annotated[str, typer.Argument(help="Topic name.", show_default=False)]


@app.command("create")
def create(
    name: TopicName,
    partitions: Annotated[
        int | None,
        typer.Option(
            "--partitions", "-p", min=1, help="Number of partitions (default: the broker's)."
        ),
    ] = None,
    replication_factor: Annotated[
        int | None,
        typer.Option(
            "--replication-factor", "-r", min=1,
            help="Replicas per partition (default: the broker's default.replication.factor).",
        ),
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config",
            "-c",
            metavar="NAME=VALUE",
            help="Topic config override, e.g. retention.ms=60000; repeatable.",
        ),
    ] = None,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """Create a topic. Fails if it exists already."""
    try:
        configs = parse_configs(config or [])
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--config'") from e
    TopicAdmin(bootstrap_servers).create(name, partitions, replication_factor, configs)
    stdout.print(f"Created topic [bold]{escape(name)}[/bold].")


@app.command("list")
def list_topics(
    names_only: NamesOnly = False,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """List the topics of the cluster, internal ones included."""
    topics = TopicAdmin(bootstrap_servers).list_topics()
    rows = [(t.name, str(t.partitions)) for t in topics]
    print_listing(("Topic", "Partitions"), rows, names_only=names_only, empty="No topics.")


@app.command("describe")
def describe(
    name: TopicName,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """Show a topic's partitions (leader, replicas, in-sync replicas) and its configs."""
    stdout.print(_render(TopicAdmin(bootstrap_servers).describe(name)))


@app.command("alter-config")
def alter_config(
    name: TopicName,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", "-s", metavar="NAME=VALUE",
                     help="Override a config, e.g. retention.ms=60000; repeatable."),
    ] = None,
    delete: Annotated[
        list[str] | None,
        typer.Option("--delete", "-d", metavar="NAME",
                     help="Remove an override (back to the broker default); repeatable."),
    ] = None,
    append: Annotated[
        list[str] | None,
        typer.Option("--append", metavar="NAME=VALUE",
                     help="Add items to a list config, e.g. cleanup.policy=compact."),
    ] = None,
    subtract: Annotated[
        list[str] | None,
        typer.Option("--subtract", metavar="NAME=VALUE",
                     help="Remove items from a list config, e.g. cleanup.policy=delete."),
    ] = None,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """Change a topic's configs (IncrementalAlterConfigs): all changes or none.

    The broker checks every name and value; a wrong one fails with its explanation.
    """
    try:
        sets = parse_configs(set_ or [])
        appends = parse_configs(append or [])
        subtracts = parse_configs(subtract or [])
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    if not (sets or delete or appends or subtracts):
        raise typer.BadParameter("nothing to change: give --set, --delete, --append or --subtract")
    TopicAdmin(bootstrap_servers).alter_configs(name, sets, list(delete or []), appends, subtracts)
    changed = len(sets) + len(delete or []) + len(appends) + len(subtracts)
    stdout.print(f"Altered {plural(changed, 'config')} of topic [bold]{escape(name)}[/bold].")


@app.command("delete")
def delete(
    name: TopicName,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """Delete a topic and all its records. Fails if it does not exist."""
    TopicAdmin(bootstrap_servers).delete(name)
    stdout.print(f"Deleted topic [bold]{escape(name)}[/bold].")


def _render(topic: TopicDescription) -> Group:
    header = Text.assemble(
        "Topic ",
        (topic.name, "bold"),
        f": {plural(len(topic.partitions), 'partition')}, "
        f"replication factor {topic.replication_factor}",
    )
    with_errors = any(p.error for p in topic.partitions)
    partitions = Table("Partition", "Leader", "Replicas", "In-sync replicas")
    if with_errors:
        partitions.add_column("Error")
    for p in topic.partitions:
        row = [str(p.partition), str(p.leader) if p.leader >= 0 else "none"]
        row += [_ids(p.replicas), _ids(p.isr)]
        partitions.add_row(*row, *([escape(p.error or "")] if with_errors else []))
    if not topic.configs:
        return Group(header, partitions, "The broker reported no configs for this topic.")
    configs = Table("Config", "Value", "Source")
    for c in topic.configs:
        value = "(sensitive)" if c.value is None else c.value
        configs.add_row(
            escape(c.name), escape(value), c.source, style="" if c.is_default else "bold"
        )
    if not topic.storage:
        return Group(header, partitions, configs)
    storage = Table("Partition", "Log start", "Local start", "End", "Local bytes",
                    "Tiered to", "Remote bytes", title="Tiered storage")
    for s in topic.storage:
        storage.add_row(str(s.partition), str(s.log_start), str(s.local_start), str(s.end),
                        _size(s.local_bytes), str(s.tiered_end) if s.tiered_end >= 0 else "-",
                        _size(s.remote_bytes))
    return Group(header, partitions, storage, configs)


def _size(n: int) -> str:
    return "?" if n < 0 else str(n)


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(map(str, ids)) or "-"
