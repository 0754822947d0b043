"""A KIP-848 consumer group's state, and the member reconciliation rules.

Plain data plus rules that need no clock. Three epochs, as in Kafka:

* the **group epoch** moves whenever membership, a subscription or the partition count of
  a subscribed topic changes;
* the **assignment epoch** is the group epoch the current target assignment was computed
  for (the coordinator recomputes as soon as the group epoch passes it);
* each **member epoch** is the assignment epoch the member has reconciled to.

A member moves towards its target in steps (``reconcile``, Kafka's CurrentAssignmentBuilder):
first it is told to give up the partitions no longer in its target (UNREVOKED_PARTITIONS,
member epoch unchanged); once it reports them gone it moves to the assignment epoch and
gets the new partitions that no other member still owns (UNRELEASED_PARTITIONS until the
rest are released). A partition is therefore never owned by two members at once. Each
owned partition remembers the member epoch it came with (KIP-1251: what an offset commit
sent with an older epoch may still write).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum

from headrace.broker.groups.assignors import MemberAssignment


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(Enum):
    """Named as ConsumerGroupDescribe and ListGroups report them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


# The epoch a static member sends to leave temporarily (it keeps its assignment until its
# session expires), and the one of a member leaving for good.
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


def _count(assignment: MemberAssignment) -> int:
    return sum(len(ps) for ps in assignment.values())


def _minus(a: MemberAssignment, b: MemberAssignment) -> MemberAssignment:
    out = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _and(a: MemberAssignment, b: MemberAssignment) -> MemberAssignment:
    out = {t: ps & b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _union(a: MemberAssignment, b: MemberAssignment) -> MemberAssignment:
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return {t: ps for t, ps in out.items() if ps}


def is_subset(a: MemberAssignment, b: MemberAssignment) -> bool:
    return not _minus(a, b)


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    # Partitions the member may use, and those it was told to give up but still owns.
    assigned: MemberAssignment = field(default_factory=dict)
    pending_revocation: MemberAssignment = field(default_factory=dict)
    # KIP-1251: (topic id, partition) -> the member epoch at which the member got it, for
    # every partition assigned or pending revocation.
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    # Loop times after which the member is fenced: no heartbeat, or no revocation.
    session_deadline: float = 0.0
    revocation_deadline: float = 0.0

    def owned(self) -> MemberAssignment:
        """What the member may still hold: assigned plus pending revocation."""
        return _union(self.assigned, self.pending_revocation)

    def may_commit(self, topic_id: uuid.UUID, partition: int, epoch: int) -> bool:
        """KIP-1251: whether a commit sent with member epoch ``epoch`` (at most the
        member's) may write ``partition``: the member owns it (assigned or pending
        revocation) and got it at ``epoch`` or before."""
        got = self.partition_epochs.get((topic_id, partition))
        return got is not None and got <= epoch


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    # instance id -> member id of static members.
    static_members: dict[str, str] = field(default_factory=dict)
    target: dict[str, MemberAssignment] = field(default_factory=dict)
    # Subscribed topic id -> partition count, as of the last group epoch bump.
    subscribed: dict[uuid.UUID, int] = field(default_factory=dict)
    assignor_name: str = ""
    dead: bool = False

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def _owned_by_others(self, member_id: str) -> MemberAssignment:
        """Every partition a member other than ``member_id`` may still hold."""
        held: MemberAssignment = {}
        for m in self.members.values():
            if m.member_id != member_id:
                held = _union(held, m.owned())
        return held

    def reconcile(self, member: ConsumerMember,
                  reported: MemberAssignment | None, now: float) -> None:
        """Move ``member`` towards its target assignment (see the module docstring).
        ``reported`` is what the member says it owns (None: not sent this time).
        Idempotent for a given group state."""
        target = self.target.get(member.member_id, {})
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if reported is None or _and(member.pending_revocation, reported):
                return
            for t, ps in member.pending_revocation.items():
                for p in ps:
                    member.partition_epochs.pop((t, p), None)
            member.pending_revocation = {}
            member.state = MemberState.STABLE
        if member.member_epoch == self.assignment_epoch \
                and member.state is MemberState.STABLE:
            return
        kept = _and(member.assigned, target)
        revoke = _minus(member.assigned, target)
        if revoke:
            member.assigned = kept
            member.pending_revocation = revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.revocation_deadline = now + member.rebalance_timeout_ms / 1000
            return
        wanted = _minus(target, kept)
        held = self._owned_by_others(member.member_id) if wanted else {}
        free: dict[uuid.UUID, frozenset[int]] = {}
        for t, ps in wanted.items():
            ok = ps - held.get(t, frozenset())
            if ok:
                free[t] = ok
        member.assigned = _union(kept, free)
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
        for t, ps in free.items():
            for p in ps:
                member.partition_epochs[(t, p)] = member.member_epoch
        unreleased = _count(wanted) != _count(free)
        member.state = (MemberState.UNRELEASED_PARTITIONS if unreleased
                        else MemberState.STABLE)

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (ties: by name); else ``default``."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return default
        return min(votes, key=lambda name: (-votes[name], name))
