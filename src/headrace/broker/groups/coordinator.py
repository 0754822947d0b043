"""The group coordinator: Kafka's classic group protocol state machine.

States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, and back to
PreparingRebalance whenever membership or subscriptions change; Dead once deleted.

* JoinGroup: protocol metadata over ``max_member_metadata_bytes`` is refused with
  MESSAGE_TOO_LARGE and changes nothing. v4+ members without an id first get MEMBER_ID_REQUIRED and an id to come
  back with (KIP-394). A join that changes the group starts a rebalance; the rebalance
  completes when every known member has rejoined or the largest rebalance timeout
  passes (members that did not rejoin are removed). A rebalance starting from Empty
  waits ``initial_rebalance_delay_ms`` more, extended by each new join, so members
  starting together land in one generation. The leader's response lists every member
  with its metadata for the chosen protocol; the others get none.
* SyncGroup: the leader's assignments complete the rebalance (Stable); followers wait
  for them. Generation, member and instance id are fenced (ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS).
* Heartbeat keeps a member alive for its session timeout; during a rebalance it answers
  REBALANCE_IN_PROGRESS so the member rejoins. Members awaiting a join or sync response
  are kept alive by the rebalance timeout instead.
* Static members (``group.instance.id``) keep their identity across restarts: a rejoin
  under the same instance id replaces the old member id (fencing the old one) and, when
  nothing else changed in a Stable group, gets its assignment back without a rebalance.

Everything runs on the broker's event loop. Each deadline (a session, a pending member
id, a rebalance's initial delay, join or sync deadline) is added to ``Deadlines`` when it
is set, and a loop timer checks its group when it comes, as Kafka's timer wheel does; a
request that looks a group up first applies every deadline already passed, so a request
handled after a member's deadline never finds it (DeleteGroups right after a session
timeout finds the group Empty, however busy the loop). A session restarts with each
JoinGroup, SyncGroup, Heartbeat and OffsetCommit of the member (Kafka restarts it on an
OffsetCommit only in Stable and PreparingRebalance; here the commit is refused in
CompletingRebalance, and Empty has no members).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from headrace.broker.groups.deadlines import Deadlines
from headrace.broker.groups.group import Group, GroupState, JoinResult, Member
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

log = logging.getLogger(__name__)

# ``run`` also checks every group this often: a backstop, deadlines have their own timers.
BACKSTOP_SWEEP_SECONDS = 1.0


@dataclass(frozen=True)
class GroupConfig:
    """Kafka's group.* broker settings (milliseconds)."""

    min_session_timeout_ms: int = 1_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 300
    max_size: int = 1_000
    # Largest protocol metadata a member may send (kept in memory, sent to the leader).
    max_member_metadata_bytes: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    client_id: str
    client_host: str
    require_known_member_id: bool
    # JoinGroup v9+ (KIP-814): a leader may be told to skip computing an assignment.
    supports_skip_assignment: bool = False


class GroupCoordinator:
    """All groups of this broker. ``on_generation`` is told of each completed rebalance
    (for persistence) and ``on_deleted`` of each deleted group."""

    def __init__(self, config: GroupConfig,
                 on_generation: Callable[[Group], None] | None = None) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        self._on_generation = on_generation
        # Whether a group id belongs to a KIP-848 consumer group (JoinGroup then answers
        # INCONSISTENT_GROUP_PROTOCOL); set by the broker state.
        self.is_foreign: Callable[[str], bool] = lambda group_id: False
        self._timers = Deadlines(self.expire_due)

    # --- lookups ----------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        """The live group, after applying the deadlines already passed."""
        self.expire_due()
        group = self.groups.get(group_id)
        return None if group is None or group.state is GroupState.DEAD else group

    def get_or_create(self, group_id: str) -> Group:
        group = self.group(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    def _member(self, group: Group | None, member_id: str,
                group_instance_id: str | None) -> Member:
        """The member, after the instance-id fence. Raises UNKNOWN_MEMBER_ID or
        FENCED_INSTANCE_ID."""
        if group is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_MEMBER_ID)
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is not None and current != member_id:
                raise KafkaProtocolError(ErrorCode.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_MEMBER_ID)
        return member

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def _touch(self, group: Group, member: Member) -> None:
        """Restart the member's session."""
        member.session_deadline = self._at(group, self._now() + member.session_timeout_ms / 1000)

    def _at(self, group: Group, when: float) -> float:
        """Check ``group`` at loop time ``when`` (returned, for chaining)."""
        self._timers.add(when, group.group_id)
        return when

    # --- JoinGroup --------------------------------------------------------------------

    async def join(self, req: JoinRequest) -> JoinResult:
        """Handle a JoinGroup; may wait for the rebalance to complete. Never raises for
        protocol errors: they come back as the result's error code."""
        try:
            return await self._join(req)
        except KafkaProtocolError as e:
            return JoinResult(error_code=e.code, member_id=req.member_id)

    async def _join(self, req: JoinRequest) -> JoinResult:
        cfg = self.config
        if not req.group_id:
            raise KafkaProtocolError(ErrorCode.INVALID_GROUP_ID)
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            raise KafkaProtocolError(ErrorCode.INVALID_SESSION_TIMEOUT)
        if sum(len(m) for _, m in req.protocols) > cfg.max_member_metadata_bytes:
            raise KafkaProtocolError(ErrorCode.MESSAGE_TOO_LARGE)
        if self.is_foreign(req.group_id):
            raise KafkaProtocolError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        group = self.group(req.group_id)
        if group is None:
            # Only a join without a member id may create a group (no phantom groups).
            if req.member_id:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_MEMBER_ID)
            if not req.protocol_type or not req.protocols:
                raise KafkaProtocolError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            group = self.get_or_create(req.group_id)
        if not group.supports(req.protocol_type, req.protocols, req.member_id):
            raise KafkaProtocolError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if not req.member_id:
            return await self._join_unknown(group, req)
        if req.member_id in group.pending_members:
            del group.pending_members[req.member_id]
            return await self._add_and_wait(group, req, req.member_id)
        member = self._member(group, req.member_id, req.group_instance_id)
        return await self._rejoin(group, member, req)

    async def _join_unknown(self, group: Group, req: JoinRequest) -> JoinResult:
        prefix = req.group_instance_id or req.client_id or "member"
        member_id = f"{prefix}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            old_id = group.static_members.get(req.group_instance_id)
            if old_id is not None and old_id in group.members:
                return await self._replace_static(group, group.members[old_id], member_id, req)
            return await self._add_and_wait(group, req, member_id)
        if len(group.members) + len(group.pending_members) >= self.config.max_size:
            raise KafkaProtocolError(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if req.require_known_member_id:
            group.pending_members[member_id] = self._at(
                group, self._now() + req.session_timeout_ms / 1000)
            return JoinResult(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
        return await self._add_and_wait(group, req, member_id)

    async def _add_and_wait(self, group: Group, req: JoinRequest, member_id: str) -> JoinResult:
        if len(group.members) >= self.config.max_size:
            raise KafkaProtocolError(ErrorCode.GROUP_MAX_SIZE_REACHED)
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                        req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type,
                        req.protocols)
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if req.group_instance_id is not None:
            group.static_members[req.group_instance_id] = member_id
        self._touch(group, member)
        # Keep our own reference: completing the join resets member.join_future.
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = fut
        if group.state is GroupState.PREPARING_REBALANCE and group.initial_delay_until:
            self._extend_initial_delay(group)
        self._prepare_rebalance(group, f"member {member_id} joined")
        self._try_complete_join(group)
        return await fut

    async def _replace_static(self, group: Group, old: Member, member_id: str,
                              req: JoinRequest) -> JoinResult:
        """A static member came back under a new member id: the old id is fenced. In a
        Stable group with unchanged protocols it gets its assignment back without a
        rebalance, even when it was the leader (Kafka's
        ``updateStaticMemberThenRebalanceOrCompleteJoin``): the leader id moves to the new
        member id; v9+ tell it that it leads with ``skip_assignment`` (and the member list,
        so it can watch the subscriptions), older versions name the old leader id so the
        member acts as a follower and just syncs."""
        self._fail_pending(old, ErrorCode.FENCED_INSTANCE_ID)
        del group.members[old.member_id]
        new = Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                     req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type,
                     req.protocols, assignment=old.assignment)
        group.members[member_id] = new
        assert req.group_instance_id is not None
        group.static_members[req.group_instance_id] = member_id
        old_leader = group.leader_id or ""
        if old_leader == old.member_id:
            group.leader_id = member_id
        self._touch(group, new)
        if group.state is GroupState.STABLE and old.same_protocols(req.protocols):
            if group.leader_id != member_id:
                return self._current_generation(group, new, as_leader=False)
            if req.supports_skip_assignment:
                return replace(self._current_generation(group, new, as_leader=True),
                               skip_assignment=True)
            return replace(self._current_generation(group, new, as_leader=False),
                           leader=old_leader)
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        new.join_future = fut
        self._prepare_rebalance(group, f"static member {req.group_instance_id} rejoined")
        self._try_complete_join(group)
        return await fut

    async def _rejoin(self, group: Group, member: Member, req: JoinRequest) -> JoinResult:
        self._touch(group, member)
        changed = not member.same_protocols(req.protocols)
        member.protocols = req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if member.join_future is not None and not member.join_future.done():
            # A retried join while one is pending: the old request is superseded.
            member.join_future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                                     member_id=member.member_id))
        state = group.state
        if state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE) and not changed \
                and member.member_id != group.leader_id:
            # Nothing changed for a follower: resend the current generation.
            return self._current_generation(group, member, as_leader=False)
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = fut
        self._prepare_rebalance(group, f"member {member.member_id} rejoined")
        self._try_complete_join(group)
        return await fut

    def _current_generation(self, group: Group, member: Member, as_leader: bool) -> JoinResult:
        return JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "", member.member_id,
                          self._member_list(group) if as_leader else ())

    def _member_list(self, group: Group) -> tuple[tuple[str, str | None, bytes], ...]:
        protocol = group.protocol_name or ""
        return tuple((m.member_id, m.group_instance_id, m.metadata_for(protocol))
                     for m in group.members.values())

    # --- rebalance ----------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            return
        if group.state is GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                if m.sync_future is not None:
                    self._touch(group, m)  # its session restarts now that it must rejoin
                self._fail_sync(m, ErrorCode.REBALANCE_IN_PROGRESS)
        now = self._now()
        if group.state is GroupState.EMPTY and self.config.initial_rebalance_delay_ms > 0:
            group.initial_delay_until = self._at(
                group, now + self.config.initial_rebalance_delay_ms / 1000)
        else:
            group.initial_delay_until = 0.0
        group.join_deadline = self._at(group, now + group.max_rebalance_timeout_ms() / 1000)
        group.state = GroupState.PREPARING_REBALANCE
        log.info("group %s: preparing rebalance (generation %d): %s", group.group_id,
                 group.generation_id, reason)

    def _extend_initial_delay(self, group: Group) -> None:
        now = self._now()
        extended = now + self.config.initial_rebalance_delay_ms / 1000
        group.initial_delay_until = self._at(group, min(extended, group.join_deadline))

    def _try_complete_join(self, group: Group, force: bool = False) -> None:
        """Complete the rebalance when every member rejoined (after any initial delay),
        or, with ``force`` (deadline passed), without the members that did not."""
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if not force:
            if group.initial_delay_until and self._now() < group.initial_delay_until:
                return
            if not group.all_joined():
                return
        for m in [m for m in group.members.values() if m.join_future is None]:
            self._remove(group, m, "did not rejoin in time")
        group.initial_delay_until = 0.0
        group.generation_id += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol_name = group.leader_id = None
            log.info("group %s: empty at generation %d", group.group_id, group.generation_id)
            if self._on_generation:
                self._on_generation(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        group.sync_deadline = self._at(
            group, self._now() + group.max_rebalance_timeout_ms() / 1000)
        members = self._member_list(group)
        for m in group.members.values():
            fut, m.join_future = m.join_future, None
            m.assignment = b""
            self._touch(group, m)
            result = JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_type,
                                group.protocol_name, group.leader_id, m.member_id,
                                members if m.member_id == group.leader_id else ())
            if fut is not None and not fut.done():
                fut.set_result(result)
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 group.group_id, group.generation_id, len(group.members),
                 group.protocol_name, group.leader_id)

    # --- SyncGroup ----------------------------------------------------------------------

    async def sync(self, group_id: str, generation_id: int, member_id: str,
                   group_instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, assignments: dict[str, bytes]) -> bytes:
        """Handle a SyncGroup; returns the member's assignment. Raises
        ``KafkaProtocolError`` (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
        INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS)."""
        group = self.group(group_id)
        member = self._member(group, member_id, group_instance_id)
        assert group is not None
        if generation_id != group.generation_id:
            raise KafkaProtocolError(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name):
            raise KafkaProtocolError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        self._touch(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise KafkaProtocolError(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            return member.assignment
        if group.state is not GroupState.COMPLETING_REBALANCE:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_MEMBER_ID)
        self._fail_sync(member, ErrorCode.REBALANCE_IN_PROGRESS)  # a superseded retry
        member.sync_future = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = GroupState.STABLE
            for m in group.members.values():
                fut, m.sync_future = m.sync_future, None
                if fut is not None and not fut.done():
                    fut.set_result(m.assignment)
            log.info("group %s: stable at generation %d", group.group_id, group.generation_id)
            if self._on_generation:
                self._on_generation(group)
            return member.assignment
        return await member.sync_future

    # --- Heartbeat and LeaveGroup ----------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> None:
        """Raises ``KafkaProtocolError`` with the code a Heartbeat answers; returns on NONE."""
        group = self.group(group_id)
        member = self._member(group, member_id, group_instance_id)
        assert group is not None
        if generation_id != group.generation_id:
            raise KafkaProtocolError(ErrorCode.ILLEGAL_GENERATION)
        self._touch(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise KafkaProtocolError(ErrorCode.REBALANCE_IN_PROGRESS)

    def leave(self, group_id: str, member_id: str, group_instance_id: str | None) -> None:
        """Remove one member (LeaveGroup). Raises UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID."""
        group = self.group(group_id)
        if group_instance_id is not None and not member_id and group is not None:
            member_id = group.static_members.get(group_instance_id, "")
        member = self._member(group, member_id, group_instance_id)
        assert group is not None
        self._remove(group, member, "left the group")
        self._after_removal(group)

    def _remove(self, group: Group, member: Member, why: str) -> None:
        self._fail_pending(member, ErrorCode.UNKNOWN_MEMBER_ID)
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None and \
                group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        log.info("group %s: member %s %s", group.group_id, member.member_id, why)

    def _after_removal(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, "a member left")
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    @staticmethod
    def _fail_sync(member: Member, code: ErrorCode) -> None:
        fut, member.sync_future = member.sync_future, None
        if fut is not None and not fut.done():
            fut.set_exception(KafkaProtocolError(code))

    def _fail_pending(self, member: Member, code: ErrorCode) -> None:
        fut, member.join_future = member.join_future, None
        if fut is not None and not fut.done():
            fut.set_result(JoinResult(code, member_id=member.member_id))
        self._fail_sync(member, code)

    # --- offset commits ---------------------------------------------------------------

    def check_commit(self, group_id: str, generation_id: int, member_id: str,
                     group_instance_id: str | None) -> None:
        """May this OffsetCommit be stored? Generation -1 with no member id is a commit
        from a consumer without group membership, allowed while the group has no members.
        Checked in Kafka's order: INVALID_GROUP_ID, ILLEGAL_GENERATION (unknown group),
        UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS."""
        if not group_id:
            raise KafkaProtocolError(ErrorCode.INVALID_GROUP_ID)
        group = self.group(group_id)
        if generation_id < 0 and not member_id and (
                group is None or group.state is GroupState.EMPTY):
            return
        if group is None:
            raise KafkaProtocolError(ErrorCode.ILLEGAL_GENERATION)
        member = self._member(group, member_id, group_instance_id)
        if generation_id != group.generation_id:
            raise KafkaProtocolError(ErrorCode.ILLEGAL_GENERATION)
        if group.state is GroupState.COMPLETING_REBALANCE:
            raise KafkaProtocolError(ErrorCode.REBALANCE_IN_PROGRESS)
        self._touch(group, member)

    # --- deletion ---------------------------------------------------------------------

    def delete(self, group_id: str) -> None:
        """Mark an Empty group Dead. Raises GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP."""
        group = self.group(group_id)
        if group is None:
            raise KafkaProtocolError(ErrorCode.GROUP_ID_NOT_FOUND)
        if group.state is not GroupState.EMPTY:
            raise KafkaProtocolError(ErrorCode.NON_EMPTY_GROUP)
        group.state = GroupState.DEAD
        del self.groups[group_id]

    # --- timers -----------------------------------------------------------------------

    def expire_due(self) -> None:
        """Act on every deadline that has come: expire sessions and pending member ids,
        complete or restart rebalances. Called by the deadline timer and before any
        lookup of a group. Idempotent."""
        if self._timers.next() == float("inf"):
            return
        now = self._now()
        for group_id in self._timers.due(now):
            group = self.groups.get(group_id)
            if group is not None:
                self._check(group, now)

    def sweep(self) -> None:
        """Check every group against ``now`` (what ``expire_due`` does for the groups with
        a deadline due). Idempotent."""
        now = self._now()
        for group in list(self.groups.values()):
            self._check(group, now)

    def _check(self, group: Group, now: float) -> None:
        """Act on the group's deadlines at or before ``now``."""
        for pending, deadline in list(group.pending_members.items()):
            if now >= deadline:
                del group.pending_members[pending]
        if group.state is GroupState.PREPARING_REBALANCE:
            if now >= group.join_deadline:
                self._try_complete_join(group, force=True)
            else:
                self._try_complete_join(group)
        elif group.state is GroupState.COMPLETING_REBALANCE and now >= group.sync_deadline:
            # The leader never sent assignments: start over without the silent members.
            for m in [m for m in group.members.values() if m.sync_future is None]:
                self._remove(group, m, "did not sync in time")
            self._prepare_rebalance(group, "sync timed out")
            self._try_complete_join(group)
        expired = [m for m in group.members.values()
                   if m.join_future is None and m.sync_future is None
                   and now >= m.session_deadline]
        for m in expired:
            self._remove(group, m, "session timed out")
        if expired:
            self._after_removal(group)

    async def run(self) -> None:
        """Check every group each ``BACKSTOP_SWEEP_SECONDS`` (the broker runs this as a
        background task). Deadlines have their own timer; this only bounds how long a
        missed one could wait."""
        while True:
            await asyncio.sleep(BACKSTOP_SWEEP_SECONDS)
            self.sweep()
