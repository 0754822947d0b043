"""``headrace groups reset-offsets``: plan new committed offsets for a group, then apply them.

Planning only reads (committed offsets, log start and end, offsets by time), so a plan can
be shown as a dry run at any time. Applying commits the planned offsets from outside the
group, which Kafka allows only while the group is inactive (Empty or Dead: no live member
that could overwrite them with its own commits).

Targets are clamped to ``[log start, log end]`` as Kafka's ``kafka-consumer-groups.sh`` does,
so a reset never leaves the group pointing at offsets that do not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from headrace.ops.errors import GroupActiveError, InvalidInputError
from headrace.ops.groups import INACTIVE_STATES, GroupAdmin


class ResetMode(StrEnum):
    """Where to move the group: the ``--to-*`` and ``--shift-by`` options."""

    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    DATETIME = "datetime"
    SHIFT = "shift"


@dataclass(frozen=True)
class ResetSpec:
    """A reset target; ``value`` is the offset, the shift, or the time in ms since the epoch."""

    mode: ResetMode
    value: int = 0

    def __post_init__(self) -> None:
        if self.mode is ResetMode.OFFSET and self.value < 0:
            raise InvalidInputError("--to-offset must not be negative")

    def __str__(self) -> str:
        if self.mode is ResetMode.OFFSET:
            return f"to offset {self.value}"
        if self.mode is ResetMode.SHIFT:
            return f"shifted by {self.value:+d}"
        if self.mode is ResetMode.DATETIME:
            when = datetime.fromtimestamp(self.value / 1000).astimezone()
            return f"to the first record at or after {when.isoformat(timespec='milliseconds')}"
        return f"to {self.mode.value}"


@dataclass(frozen=True)
class PartitionReset:
    """One partition's move: ``current`` is None where the group has committed nothing."""

    topic: str
    partition: int
    current: int | None
    new: int
    note: str = ""


@dataclass(frozen=True)
class ResetPlan:
    """The planned moves (by partition), and the group's state when they were planned."""

    group_id: str
    topic: str
    spec: ResetSpec
    group_state: str
    partitions: tuple[PartitionReset, ...]

    @property
    def group_is_active(self) -> bool:
        return self.group_state not in INACTIVE_STATES


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of an ISO 8601 date-time; local time if it has no zone.

    ``ValueError`` (with a message for the user) if ``text`` is not ISO 8601.
    """
    try:
        when = datetime.fromisoformat(text)
    except ValueError as e:
        raise ValueError(
            f"expected an ISO 8601 date-time such as 2026-11-02T14:30:00Z, got {text!r}"
        ) from e
    if when.tzinfo is None:
        when = when.astimezone()  # naive: the local time zone, as Kafka's tool reads it
    return int(when.timestamp() * 1000)


def target(
    spec: ResetSpec, current: int | None, log_start: int, log_end: int, by_time: int | None
) -> tuple[int, str]:
    """The new offset of one partition and why it differs from what was asked ("" if not).

    ``by_time`` is ListOffsets' answer for ``spec``'s time (-1: no record that late).
    ``InvalidInputError`` for a shift where the group has no committed offset to shift.
    """
    if spec.mode is ResetMode.EARLIEST:
        return log_start, ""
    if spec.mode is ResetMode.LATEST:
        return log_end, ""
    if spec.mode is ResetMode.DATETIME:
        if by_time is None or by_time < 0:
            return log_end, "no record at or after that time: log end"
        wanted = by_time
    elif spec.mode is ResetMode.OFFSET:
        wanted = spec.value
    else:
        if current is None:
            raise InvalidInputError("cannot shift a partition where the group committed nothing")
        wanted = current + spec.value
    if wanted < log_start:
        return log_start, f"{wanted} is before the log start: clamped"
    if wanted > log_end:
        return log_end, f"{wanted} is past the log end: clamped"
    return wanted, ""


def plan_reset(
    admin: GroupAdmin,
    group_id: str,
    topic: str,
    spec: ResetSpec,
    partitions: list[int] | None = None,
) -> ResetPlan:
    """Compute, without changing anything, where ``spec`` moves the group on ``topic``.

    ``partitions`` default to all of the topic's. Raises ``UnknownTopicError`` for a missing
    topic or partition, ``InvalidInputError`` for a shift with nothing committed to shift.
    A group that does not exist yet is planned from nothing (Kafka lets a reset create it).
    """
    chosen = admin.partitions(topic, partitions or None)
    state = admin.state(group_id)
    tps = [(topic, p) for p in chosen]
    committed = admin.committed(group_id, tps)
    starts = admin.list_offsets(tps, "earliest")
    ends = admin.list_offsets(tps, "latest")
    by_time = admin.list_offsets(tps, spec.value) if spec.mode is ResetMode.DATETIME else {}
    moves = []
    for tp in tps:
        current = committed.get(tp)
        try:
            new, note = target(spec, current, starts[tp], ends[tp], by_time.get(tp))
        except InvalidInputError as e:
            raise InvalidInputError(
                f"cannot shift {topic}-{tp[1]}: group {group_id!r} has no committed offset "
                "there (leave it out with --partition, or use a --to-* option)"
            ) from e
        moves.append(PartitionReset(topic, tp[1], current, new, note))
    return ResetPlan(group_id, topic, spec, state, tuple(moves))


def apply_reset(admin: GroupAdmin, plan: ResetPlan) -> None:
    """Commit the plan's offsets. Refused with ``GroupActiveError`` while the group has live
    members (checked from the plan's state, and again by the broker when committing)."""
    if plan.group_is_active:
        raise GroupActiveError(
            f"group {plan.group_id!r} is {plan.group_state}: offsets can only be reset while "
            "it has no live members (Empty); stop its consumers first"
        )
    admin.alter_offsets(plan.group_id, {(m.topic, m.partition): m.new for m in plan.partitions})
