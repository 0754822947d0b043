"""``headrace groups ...``: the Typer sub-application over ``headrace.ops.groups``."""

from __future__ import annotations

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
    dash,
    plural,
    print_listing,
    stderr,
    stdout,
    topic_partitions,
)
from headrace.ops.clients import DEFAULT_BOOTSTRAP_SERVERS
from headrace.ops.groups import GroupAdmin, GroupDescription
from headrace.ops.offset_reset import (
    ResetMode,
    ResetPlan,
    ResetSpec,
    apply_reset,
    parse_datetime,
    plan_reset,
)

app = typer.Typer(
    name="groups",
    help="List, describe (with lag), reset the offsets of, and delete consumer groups.",
    no_args_is_help=True,
)

GroupId = Annotated[
    str, typer.Argument(help="Consumer group id.", metavar="GROUP", show_default=False)
]


@app.command("list")
def list_groups(
    names_only: NamesOnly = False,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """List consumer groups with their state, Empty ones (only committed offsets) included.

    Protocol type "consumer" is a group of subscribing consumers; "-" is a simple group,
    whose offsets were committed without joining (e.g. by reset-offsets).
    """
    groups = GroupAdmin(bootstrap_servers).list_groups()
    rows = [(g.group_id, g.state, g.protocol_type or "-") for g in groups]
    headers = ("Group", "State", "Protocol type")
    print_listing(headers, rows, names_only=names_only, empty="No groups.")


@app.command("describe")
def describe(
    group_id: GroupId,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """Show a group's state, members and, per partition, committed offset, log end and lag.

    Lag is log end offset minus committed offset; "-" where the group committed nothing.
    Partitions the group committed to but no live member owns are listed too.
    """
    stdout.print(_render_group(GroupAdmin(bootstrap_servers).describe(group_id)))


@app.command("reset-offsets")
def reset_offsets(
    group_id: GroupId,
    topic: Annotated[
        str, typer.Option("--topic", "-t", help="Topic whose offsets to reset.", show_default=False)
    ],
    to_earliest: Annotated[
        bool, typer.Option("--to-earliest", help="To the oldest record still in the log.")
    ] = False,
    to_latest: Annotated[
        bool, typer.Option("--to-latest", help="To the log end: skip everything so far.")
    ] = False,
    to_offset: Annotated[
        int | None, typer.Option("--to-offset", min=0, help="To this offset.", metavar="N")
    ] = None,
    to_datetime: Annotated[
        str | None,
        typer.Option(
            "--to-datetime",
            help="To the first record at or after this ISO 8601 time (no zone: local time).",
            metavar="ISO",
        ),
    ] = None,
    shift_by: Annotated[
        int | None,
        typer.Option(
            "--shift-by", help="Move the committed offsets by N (negative: back).", metavar="N"
        ),
    ] = None,
    partition: Annotated[
        list[int] | None,
        typer.Option(
            "--partition",
            "-p",
            min=0,
            metavar="P",
            help="Only this partition (repeatable; default: all).",
        ),
    ] = None,
    execute: Annotated[
        bool, typer.Option("--execute", help="Apply the new offsets (default: dry run).")
    ] = False,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """Move a group's committed offsets on one topic; a dry run unless --execute is given.

    Exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by.
    Offsets are clamped to the partition's log start and log end, as Kafka's tool does.
    --execute is refused while the group has live members (it must be Empty).
    """
    spec = _reset_spec(to_earliest, to_latest, to_offset, to_datetime, shift_by)
    admin = GroupAdmin(bootstrap_servers)
    plan = plan_reset(admin, group_id, topic, spec, partition)
    if execute:
        apply_reset(admin, plan)
    stdout.print(_render_plan(plan))
    if execute:
        moved = plural(len(plan.partitions), "partition")
        stdout.print(f"Reset the offsets of group {escape(group_id)} on {moved}.")
        return
    stdout.print("Dry run: nothing changed. Add --execute to commit these offsets.")
    if plan.group_is_active:
        stderr.print(
            f"note: group {escape(group_id)} is {plan.group_state}; --execute is refused until "
            "its consumers stop."
        )


@app.command("delete")
def delete(
    group_id: GroupId,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """Delete a group and its committed offsets. Fails if it has live members."""
    GroupAdmin(bootstrap_servers).delete(group_id)
    stdout.print(f"Deleted group [bold]{escape(group_id)}[/bold].")


def _reset_spec(
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_datetime: str | None,
    shift_by: int | None,
) -> ResetSpec:
    chosen: list[ResetSpec] = []
    if to_earliest:
        chosen.append(ResetSpec(ResetMode.EARLIEST))
    if to_latest:
        chosen.append(ResetSpec(ResetMode.LATEST))
    if to_offset is not None:
        chosen.append(ResetSpec(ResetMode.OFFSET, to_offset))
    if to_datetime is not None:
        try:
            chosen.append(ResetSpec(ResetMode.DATETIME, parse_datetime(to_datetime)))
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="'--to-datetime'") from e
    if shift_by is not None:
        chosen.append(ResetSpec(ResetMode.SHIFT, shift_by))
    if len(chosen) != 1:
        raise typer.BadParameter(
            "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by"
        )
    return chosen[0]


def _render_group(group: GroupDescription) -> Lines:
    kind = group.protocol_type or "simple (no protocol)"
    assignor = f", assignor {group.assignor}" if group.assignor else ""
    header = Text.assemble(
        "Group ",
        (group.group_id, "bold"),
        f": {group.state}, {kind}{assignor}, {plural(len(group.members), 'member')}",
    )
    parts: list[Table | Text | str] = [header]
    if group.members:
        members = Table("Member", "Client id", "Host", "Assigned partitions")
        for m in group.members:
            members.add_row(
                escape(m.member_id),
                escape(m.client_id),
                escape(m.host),
                escape(topic_partitions(m.partitions)),
            )
        parts.append(members)
    if group.partitions:
        offsets = Table("Topic", "Partition", "Committed", "Log end", "Lag", "Member")
        for p in group.partitions:
            offsets.add_row(
                escape(p.topic),
                str(p.partition),
                dash(p.committed),
                dash(p.log_end_offset),
                dash(p.lag),
                escape(p.member_id or "-"),
            )
        parts.append(offsets)
    else:
        parts.append("No partitions assigned and no offsets committed.")
    parts.append(f"Total lag: {group.total_lag}")
    return Lines(*parts)


def _render_plan(plan: ResetPlan) -> Lines:
    header = Text.assemble(
        "Group ",
        (plan.group_id, "bold"),
        f" ({plan.group_state}): topic {plan.topic} {plan.spec}",
    )
    with_notes = any(m.note for m in plan.partitions)
    table = Table("Topic", "Partition", "Current", "New")
    if with_notes:
        table.add_column("Note")
    for m in plan.partitions:
        row = [escape(m.topic), str(m.partition), dash(m.current), str(m.new)]
        table.add_row(*row, *([escape(m.note)] if with_notes else []))
    return Lines(header, table)
