"""A consumer group's state: members, generation, chosen protocol, assignments.

Plain data plus the rules that need no clock: protocol selection and validation. The
state machine that moves a group between states lives in ``coordinator``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from headrace.protocol.errors import ErrorCode, KafkaProtocolError


class GroupState(Enum):
    """Kafka's classic group states, named as DescribeGroups/ListGroups report them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a JoinGroup response carries for one member."""

    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    # Filled for the leader only: (member_id, group_instance_id, metadata).
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    # v9+ (KIP-814): the leader must not compute an assignment (a static leader rejoined
    # a Stable group and got its old assignment back).
    skip_assignment: bool = False


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # Deadline (loop time) after which the member is considered dead.
    session_deadline: float = 0.0
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[bytes] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KafkaProtocolError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)

    def subscription(self, protocol: str | None) -> bytes:
        """Metadata for ``protocol`` if the member lists it, else its first protocol's
        (during a protocol switch); never raises."""
        by_name = dict(self.protocols)
        if protocol in by_name:
            return by_name[protocol]
        return self.protocols[0][1] if self.protocols else b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # KIP-394: ids handed out with MEMBER_ID_REQUIRED, valid until the deadline.
    pending_members: dict[str, float] = field(default_factory=dict)
    # group.instance.id -> member id, for static members.
    static_members: dict[str, str] = field(default_factory=dict)
    # Loop time at which PreparingRebalance stops waiting for members to rejoin, and the
    # (shorter, extendable) initial delay of a rebalance that started from Empty.
    join_deadline: float = 0.0
    initial_delay_until: float = 0.0
    # Loop time at which CompletingRebalance stops waiting for the leader's SyncGroup.
    sync_deadline: float = 0.0

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]],
                 member_id: str = "") -> bool:
        """Whether a member with these protocols may (re)join: a non-empty type and list,
        the group's type, and a protocol every other member supports."""
        if not protocol_type or not protocols:
            return False
        others = [m for m in self.members.values() if m.member_id != member_id]
        if not others:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self._candidates(others) & {name for name, _ in protocols})

    def _candidates(self, members: list[Member] | None = None) -> set[str]:
        """Protocols every given member (default: all) supports."""
        chosen = list(self.members.values()) if members is None else members
        sets = [{name for name, _ in m.protocols} for m in chosen]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Kafka's rule: among protocols all members support, the one most members list
        first among those (each member votes for its most preferred candidate)."""
        candidates = self._candidates()
        if not candidates:
            raise KafkaProtocolError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(name for name, _ in m.protocols if name in candidates)] += 1
        best = max(votes.values())
        # Ties: the first member's preference order decides, deterministically.
        first = next(iter(self.members.values()))
        return next(name for name, _ in first.protocols if votes.get(name) == best)

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        """Every member awaits a join response, and no KIP-394 member id is outstanding."""
        return not self.pending_members and all(
            m.join_future is not None for m in self.members.values())
