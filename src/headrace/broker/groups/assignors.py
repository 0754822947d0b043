"""Server-side partition assignors of the KIP-848 consumer group protocol.

Pure functions, no clock, no I/O: the coordinator calls ``assign`` whenever the group
epoch moves past the target assignment epoch, with the members' resolved subscriptions,
the partition count of every subscribed topic and the previous target assignment.

* ``uniform`` (Kafka's default): spreads every subscribed partition over the members that
  subscribe to its topic, as evenly as subscriptions allow (within one partition of each
  other when all members subscribe to the same topics), and sticky: a member keeps the
  previous target partitions that are still valid up to its fair share, so a join or a
  leave moves only the partitions that must move.
* ``range``: per topic, the subscribed members sorted by member id get contiguous ranges
  of partitions, the first ``partitions % members`` one more; co-partitioned topics land
  on the same member. Deterministic, hence stable while membership is unchanged.

Topics are identified by their id (``uuid.UUID``); members by member id.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from headrace.protocol.errors import ErrorCode, KafkaProtocolError

MemberAssignment = dict[uuid.UUID, frozenset[int]]
GroupAssignment = dict[str, MemberAssignment]


@dataclass(frozen=True)
class AssignmentSpec:
    """The input of an assignor.

    ``subscriptions``: member id -> ids of the (existing) topics it subscribes to.
    ``partitions``: topic id -> partition count, for every subscribed topic.
    ``current``: the previous target assignment (may name members or topics that are gone).
    """

    subscriptions: Mapping[str, frozenset[uuid.UUID]]
    partitions: Mapping[uuid.UUID, int]
    current: Mapping[str, MemberAssignment] = field(default_factory=dict)


def _freeze(owned: dict[str, dict[uuid.UUID, set[int]]]) -> GroupAssignment:
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps}
            for m, topics in owned.items()}


def uniform(spec: AssignmentSpec) -> GroupAssignment:
    """Balanced and sticky; see the module docstring."""
    members = sorted(spec.subscriptions)
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    count = dict.fromkeys(members, 0)
    if not members:
        return {}
    eligible: dict[uuid.UUID, list[str]] = {}
    for m in members:
        for t in spec.subscriptions[m]:
            if t in spec.partitions:
                eligible.setdefault(t, []).append(m)
    total = sum(spec.partitions[t] for t in eligible)
    # Fair share under identical subscriptions; with different ones the balancing pass
    # below evens out what subscriptions allow.
    quota = -(-total // len(members))
    taken: set[tuple[uuid.UUID, int]] = set()
    for m in members:
        for t, parts in sorted(spec.current.get(m, {}).items()):
            if t not in spec.subscriptions[m] or t not in spec.partitions:
                continue
            for p in sorted(parts):
                if p < spec.partitions[t] and (t, p) not in taken and count[m] < quota:
                    owned[m].setdefault(t, set()).add(p)
                    taken.add((t, p))
                    count[m] += 1
    for t in sorted(eligible):
        for p in range(spec.partitions[t]):
            if (t, p) in taken:
                continue
            m = min(eligible[t], key=lambda x: (count[x], x))
            owned[m].setdefault(t, set()).add(p)
            count[m] += 1
    _balance(owned, count, spec.subscriptions)
    return _freeze(owned)


def _balance(owned: dict[str, dict[uuid.UUID, set[int]]], count: dict[str, int],
             subscriptions: Mapping[str, frozenset[uuid.UUID]]) -> None:
    """Move partitions from the most to the least loaded member that may take them, until
    no move brings two members closer than a difference of one."""
    moved = True
    while moved:
        moved = False
        by_load = sorted(count, key=lambda x: (count[x], x))
        for receiver in by_load:
            for donor in reversed(by_load):
                if count[donor] - count[receiver] <= 1:
                    break
                for t in sorted(owned[donor]):
                    if t in subscriptions[receiver] and owned[donor][t]:
                        p = max(owned[donor][t])
                        owned[donor][t].discard(p)
                        owned[receiver].setdefault(t, set()).add(p)
                        count[donor] -= 1
                        count[receiver] += 1
                        moved = True
                        break
                if moved:
                    break
            if moved:
                break


def range_(spec: AssignmentSpec) -> GroupAssignment:
    """Contiguous ranges per topic; see the module docstring."""
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in spec.subscriptions}
    for t, n in spec.partitions.items():
        members = sorted(m for m, subs in spec.subscriptions.items() if t in subs)
        if not members:
            continue
        base, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            size = base + (1 if i < extra else 0)
            if size:
                owned[m][t] = set(range(start, start + size))
            start += size
    return _freeze(owned)


ASSIGNORS: dict[str, Callable[[AssignmentSpec], GroupAssignment]] = {
    "uniform": uniform,
    "range": range_,
}
# The first is the default, as in Kafka's group.consumer.assignors.
DEFAULT_ASSIGNOR = "uniform"


def assignor(name: str) -> Callable[[AssignmentSpec], GroupAssignment]:
    """The assignor called ``name``; raises UNSUPPORTED_ASSIGNOR for any other name."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise KafkaProtocolError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                                 f"Server assignor {name} is not supported. "
                                 f"Supported assignors: {', '.join(ASSIGNORS)}.") from None
