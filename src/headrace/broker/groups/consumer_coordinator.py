"""The KIP-848 consumer group coordinator: ConsumerGroupHeartbeat, leaves, fencing.

Answers as Apache Kafka 4.3 does (checked against it): a heartbeat with member epoch 0
joins (v1 members bring their own member id, KIP-1082; v0 members get one), -1 leaves,
-2 leaves temporarily (static members: the assignment is kept for the instance id until
the session expires). Errors:

* INVALID_REQUEST for malformed heartbeats; UNSUPPORTED_ASSIGNOR;
  INVALID_REGULAR_EXPRESSION;
* GROUP_ID_NOT_FOUND when joining a group id that a classic group with members holds,
  and for a leave from an unknown group;
* UNKNOWN_MEMBER_ID for an unknown member, and for a heartbeat (epoch > 0) to a group
  this broker does not know: Kafka says GROUP_ID_NOT_FOUND there, but UNKNOWN_MEMBER_ID
  makes members rejoin where GROUP_ID_NOT_FOUND is fatal to the Java client (a group
  can be unknown here after its records were lost, e.g. a data directory wiped);
* FENCED_MEMBER_EPOCH for an epoch the coordinator never gave, or an old one other than
  a retry of a lost response; UNRELEASED_INSTANCE_ID (the instance id is held by a live
  member); FENCED_INSTANCE_ID; GROUP_MAX_SIZE_REACHED.

The target assignment is computed synchronously within the heartbeat that moved the
group epoch (Kafka may defer it, reporting the group as Assigning meanwhile). Group
epochs count from 1 (Kafka's first is 2); clients treat them as opaque.

Regex subscriptions use Python's ``re`` (``fullmatch``) instead of RE2/J: the common
patterns (``orders-.*``, ``a|b``, classes, anchors) mean the same; a pattern Python cannot
compile gets INVALID_REGULAR_EXPRESSION, and Python-only constructs (backreferences,
lookaround) are accepted where Kafka refuses them. Internal topics (``__``) never match.
Subscriptions are re-resolved at each heartbeat, so created or deleted topics and added
partitions reach the group at the next heartbeat of any member.

State persists in ``__consumer_offsets`` as Kafka's records (``consumer_records``), written
as it changes, before the answer: after a restart (``kill -9`` too) members keep their ids,
epochs and assignments, and their sessions restart from the load. Not implemented: online
migration between classic and consumer groups (Kafka's
``group.consumer.migration.policy=disabled`` behaviour: classic JoinGroup on a consumer
group gets INCONSISTENT_GROUP_PROTOCOL), rack-aware assignment, client-side assignors.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from headrace.broker.groups.assignors import (
    DEFAULT_ASSIGNOR,
    AssignmentSpec,
    MemberAssignment,
    assignor,
)
from headrace.broker.groups.consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    is_subset,
)
from headrace.broker.groups.consumer_records import (
    RecordError,
    changes,
    decode_records,
    encode_group,
)
from headrace.broker.groups.deadlines import Deadlines
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

log = logging.getLogger(__name__)

# ``run`` also checks every group this often: a backstop, deadlines have their own timers.
BACKSTOP_SWEEP_SECONDS = 1.0

# topic name -> (topic id, partition count), of every live topic.
TopicsView = Callable[[], Mapping[str, tuple[uuid.UUID, int]]]
# Writes a group's changed records (None: delete the key) to __consumer_offsets.
Persist = Callable[[str, list[tuple[bytes, bytes | None]]], object]


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """Kafka's group.consumer.* broker settings (milliseconds)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2_147_483_647


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A decoded ConsumerGroupHeartbeat; ``None`` fields did not change."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: MemberAssignment | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: MemberAssignment | None = None


@dataclass
class _Changes:
    bump: bool = False
    reasons: list[str] = field(default_factory=list)


class ConsumerGroupCoordinator:
    """Every consumer group of this broker. ``is_classic_in_use(group_id)`` says whether a
    classic group with members holds the id; ``drop_classic(group_id)`` forgets an empty
    classic group whose id a consumer group takes over (its offsets stay)."""

    def __init__(self, config: ConsumerGroupConfig, topics: TopicsView,
                 is_classic_in_use: Callable[[str], bool],
                 drop_classic: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic,
                 persist: Persist | None = None) -> None:
        self.config = config
        self.groups: dict[str, ConsumerGroup] = {}
        self._topics = topics
        self._is_classic_in_use = is_classic_in_use
        self._drop_classic = drop_classic
        self._clock = clock
        self._timers = Deadlines(self.expire_due)
        self._persist = persist
        # What was last written for each group: key -> value.
        self._persisted: dict[str, dict[bytes, bytes]] = {}

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The group, after applying the deadlines already passed."""
        self.expire_due()
        return self.groups.get(group_id)

    # --- ConsumerGroupHeartbeat ---------------------------------------------------------

    def heartbeat(self, hb: Heartbeat) -> HeartbeatResult:
        """Handle one heartbeat; raises ``KafkaProtocolError`` with the answer's code.
        Runs on the event loop, never blocks."""
        self._validate(hb)
        self.expire_due()
        if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(hb)
        group = self._group_for(hb.group_id, create=hb.member_epoch == 0)
        now = self._clock()
        epochs = (group.group_epoch, group.assignment_epoch)
        changes = _Changes()
        if hb.member_epoch == 0:
            member = self._join(group, hb, changes)
        else:
            member = self._existing(group, hb)
        self._update(member, hb, changes)
        member.session_deadline = self._at(group, now + self.config.session_timeout_ms / 1000)
        self._refresh(group, changes)
        before = dict(member.assigned)
        group.reconcile(member, hb.owned, now)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            self._at(group, member.revocation_deadline)
        full = hb.member_epoch == 0 or (hb.rebalance_timeout_ms != -1 and hb.owned is not None
                                        and hb.subscribed_topic_names is not None)
        changed = before != member.assigned
        whole = hb.member_epoch == 0 or epochs != (group.group_epoch, group.assignment_epoch)
        self._save(group, None if whole else [member])
        return HeartbeatResult(member.member_id, member.member_epoch,
                               self.config.heartbeat_interval_ms,
                               dict(member.assigned) if full or changed else None)

    def _validate(self, hb: Heartbeat) -> None:
        def invalid(why: str) -> KafkaProtocolError:
            return KafkaProtocolError(ErrorCode.INVALID_REQUEST, why)

        if not hb.group_id:
            raise invalid("GroupId can't be empty.")
        if hb.rack_id is not None and not hb.rack_id:
            raise invalid("RackId can't be empty.")
        if hb.api_version >= 1 and not hb.member_id:
            raise invalid("MemberId can't be empty.")
        if hb.member_epoch < STATIC_LEAVE_EPOCH:
            raise invalid(f"MemberEpoch {hb.member_epoch} is invalid.")
        if hb.member_epoch == 0:
            if hb.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if hb.owned is None or hb.owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if hb.subscribed_topic_names is None and hb.subscribed_topic_regex is None:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in "
                              "first request.")
        elif not hb.member_id:
            raise invalid("MemberId can't be empty.")
        if hb.member_epoch == STATIC_LEAVE_EPOCH and hb.instance_id is None:
            raise invalid("InstanceId can't be null.")
        if hb.server_assignor is not None:
            assignor(hb.server_assignor)
        if hb.subscribed_topic_regex:
            try:
                re.compile(hb.subscribed_topic_regex)
            except re.error as e:
                raise KafkaProtocolError(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{hb.subscribed_topic_regex}` is not a valid "
                    f"regular expression: {e}.") from e

    def _group_for(self, group_id: str, create: bool) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if not create:
            # Kafka answers GROUP_ID_NOT_FOUND here; UNKNOWN_MEMBER_ID makes members
            # rejoin where GROUP_ID_NOT_FOUND is fatal to the Java client.
            raise KafkaProtocolError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Consumer group {group_id} not found.")
        if self._is_classic_in_use(group_id):
            raise KafkaProtocolError(ErrorCode.GROUP_ID_NOT_FOUND,
                                     f"Group {group_id} is not a consumer group.")
        self._drop_classic(group_id)
        group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    def _join(self, group: ConsumerGroup, hb: Heartbeat, changes: _Changes) -> ConsumerMember:
        member_id = hb.member_id or uuid.uuid4().hex
        if hb.instance_id is not None:
            old_id = group.static_members.get(hb.instance_id)
            old = group.members.get(old_id) if old_id is not None else None
            if old is not None and old.member_id != member_id:
                if old.member_epoch != STATIC_LEAVE_EPOCH:
                    raise KafkaProtocolError(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {hb.instance_id} cannot "
                        f"join the group because the instance id is owned by "
                        f"{old.member_id} member.")
                return self._replace_static(group, old, member_id)
        member = group.members.get(member_id)
        if member is not None:
            return member
        if len(group.members) >= self.config.max_size:
            raise KafkaProtocolError(ErrorCode.GROUP_MAX_SIZE_REACHED)
        member = ConsumerMember(member_id, hb.instance_id, hb.rack_id, hb.client_id,
                                hb.client_host, hb.rebalance_timeout_ms)
        group.members[member_id] = member
        if hb.instance_id is not None:
            group.static_members[hb.instance_id] = member_id
        changes.bump = True
        changes.reasons.append(f"member {member_id} joined")
        return member

    @staticmethod
    def _replace_static(group: ConsumerGroup, old: ConsumerMember,
                        member_id: str) -> ConsumerMember:
        """A static member came back under a new member id: it takes over the old one's
        assignment and epoch; the group epoch does not move."""
        del group.members[old.member_id]
        target = group.target.pop(old.member_id, None)
        if target is not None:
            group.target[member_id] = target
        old.member_id = member_id
        old.member_epoch = old.previous_member_epoch
        group.members[member_id] = old
        assert old.instance_id is not None
        group.static_members[old.instance_id] = member_id
        return old

    def _existing(self, group: ConsumerGroup, hb: Heartbeat) -> ConsumerMember:
        if hb.instance_id is not None:
            current = group.static_members.get(hb.instance_id)
            if current is not None and current != hb.member_id:
                raise KafkaProtocolError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {hb.member_id} with instance id {hb.instance_id} was "
                    f"fenced by member {current}.")
        member = group.members.get(hb.member_id)
        if member is None or member.member_epoch == STATIC_LEAVE_EPOCH:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {hb.member_id} is not a member of group "
                                     f"{group.group_id}.")
        epoch = hb.member_epoch
        if epoch > member.member_epoch:
            raise KafkaProtocolError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({epoch}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member "
                f"must abandon all its partitions and rejoin.")
        if epoch < member.member_epoch and not (
                epoch == member.previous_member_epoch
                and (hb.owned is None or is_subset(hb.owned, member.assigned))):
            # An old epoch is accepted only as a retry of a lost response.
            raise KafkaProtocolError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({epoch}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member "
                f"must abandon all its partitions and rejoin.")
        return member

    @staticmethod
    def _update(member: ConsumerMember, hb: Heartbeat, changes: _Changes) -> None:
        if hb.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms
        if hb.rack_id is not None:
            member.rack_id = hb.rack_id
        if hb.client_id:
            member.client_id, member.client_host = hb.client_id, hb.client_host
        if hb.subscribed_topic_names is not None:
            names = tuple(sorted(set(hb.subscribed_topic_names)))
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                changes.bump = True
                changes.reasons.append(f"member {member.member_id} subscription changed")
        if hb.subscribed_topic_regex is not None:
            regex = hb.subscribed_topic_regex or None
            if regex != member.subscribed_topic_regex:
                member.subscribed_topic_regex = regex
                changes.bump = True
                changes.reasons.append(f"member {member.member_id} regex changed")
        if hb.server_assignor is not None and hb.server_assignor != member.server_assignor:
            member.server_assignor = hb.server_assignor
            changes.bump = True

    # --- assignment ---------------------------------------------------------------------

    def subscriptions(self, group: ConsumerGroup) -> dict[str, frozenset[uuid.UUID]]:
        """Member id -> ids of the live topics it subscribes to (names and regex)."""
        topics = self._topics()
        out: dict[str, frozenset[uuid.UUID]] = {}
        for m in group.members.values():
            ids = {topics[n][0] for n in m.subscribed_topic_names if n in topics}
            if m.subscribed_topic_regex:
                pattern = re.compile(m.subscribed_topic_regex)
                ids |= {tid for name, (tid, _) in topics.items()
                        if not name.startswith("__") and pattern.fullmatch(name)}
            out[m.member_id] = frozenset(ids)
        return out

    def _refresh(self, group: ConsumerGroup, changes: _Changes) -> None:
        """Bump the group epoch on a change (or when subscribed topics changed), and
        compute the new target assignment when the group epoch moved past it."""
        subscriptions = self.subscriptions(group)
        counts = {tid: n for tid, n in self._topics().values()}
        subscribed = {t: counts[t] for subs in subscriptions.values() for t in subs}
        if subscribed != group.subscribed:
            group.subscribed = subscribed
            changes.bump = True
            changes.reasons.append("subscribed topics changed")
        if changes.bump:
            group.group_epoch += 1
            log.info("consumer group %s: epoch %d: %s", group.group_id, group.group_epoch,
                     "; ".join(changes.reasons))
        if group.group_epoch > group.assignment_epoch:
            name = group.preferred_assignor(DEFAULT_ASSIGNOR)
            group.assignor_name = name
            group.target = assignor(name)(AssignmentSpec(subscriptions, subscribed,
                                                         group.target))
            group.assignment_epoch = group.group_epoch

    # --- leaving and fencing ------------------------------------------------------------

    def _leave(self, hb: Heartbeat) -> HeartbeatResult:
        group = self.groups.get(hb.group_id)
        if group is None:
            raise KafkaProtocolError(ErrorCode.GROUP_ID_NOT_FOUND,
                                     f"Group {hb.group_id} not found.")
        member_id = hb.member_id
        if hb.instance_id is not None:
            current = group.static_members.get(hb.instance_id)
            if current is None:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_MEMBER_ID,
                                         f"Instance id {hb.instance_id} is unknown.")
            if current != member_id:
                raise KafkaProtocolError(ErrorCode.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group "
                                     f"{group.group_id}.")
        if hb.member_epoch == STATIC_LEAVE_EPOCH:
            # Keeps its partitions for the instance id until the session expires.
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            member.session_deadline = self._at(
                group, self._clock() + self.config.session_timeout_ms / 1000)
            log.info("consumer group %s: static member %s left temporarily",
                     group.group_id, member_id)
            self._save(group, [member])
        else:
            self.remove(group, member, "left the group")
        return HeartbeatResult(member_id, hb.member_epoch, 0, None)

    def remove(self, group: ConsumerGroup, member: ConsumerMember, why: str) -> None:
        """Drop a member (leave, session or revocation timeout); its partitions go to
        the others with the next group epoch."""
        group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        if member.instance_id is not None and \
                group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]
        log.info("consumer group %s: member %s %s", group.group_id, member.member_id, why)
        self._refresh(group, _Changes(True, [f"member {member.member_id} {why}"]))
        self._save(group)

    # --- persistence --------------------------------------------------------------------

    def _save(self, group: ConsumerGroup, members: list[ConsumerMember] | None = None) -> None:
        """Write what changed in the group's records since the last write: the group-level
        records and those of ``members`` (None: every member, and deletions of the records
        of members gone). Synchronous append: the answer that follows is durable as a
        commit is."""
        if self._persist is None:
            return
        names = {tid: name for name, (tid, _) in self._topics().items()}
        old = self._persisted.setdefault(group.group_id, {})
        changed = changes(old, encode_group(group, names, members), members is None)
        if not changed:
            return
        self._persist(group.group_id, changed)
        for k, v in changed:
            if v is None:
                old.pop(k, None)
            else:
                old[k] = v

    def restore(self, records: Mapping[str, Mapping[bytes, bytes]]) -> None:
        """Rebuild the groups persisted in ``__consumer_offsets`` (group id -> key ->
        value), on start, before any request. Every member's session (and a revocation
        in progress) restarts now, as in Kafka after a coordinator load: a member that
        does not come back is fenced a session timeout later. A group whose records cannot
        be decoded is skipped (logged)."""
        now = self._clock()
        for group_id, raw in records.items():
            try:
                group = decode_records(group_id, raw)
            except RecordError as e:
                log.warning("consumer group %s: state not restored: %s", group_id, e)
                continue
            group.assignor_name = group.preferred_assignor(DEFAULT_ASSIGNOR)
            for m in group.members.values():
                m.session_deadline = self._at(group, now + self.config.session_timeout_ms / 1000)
                if m.state is MemberState.UNREVOKED_PARTITIONS:
                    m.revocation_deadline = self._at(group, now + m.rebalance_timeout_ms / 1000)
            self.groups[group_id] = group
            self._persisted[group_id] = dict(raw)
            log.info("consumer group %s: restored at epoch %d with %d members", group_id,
                     group.group_epoch, len(group.members))

    def forget(self, group_id: str) -> None:
        """Drop an empty group whose records were deleted (offsets retention)."""
        self.groups.pop(group_id, None)
        self._persisted.pop(group_id, None)

    def _at(self, group: ConsumerGroup, when: float) -> float:
        """Check ``group`` at clock time ``when`` (returned, for chaining)."""
        self._timers.add(when, group.group_id)
        return when

    def expire_due(self) -> None:
        """Fence the members whose session or revocation deadline has come. Called by the
        deadline timer and before any request looks at a group. Idempotent."""
        if self._timers.next() == float("inf"):
            return
        now = self._clock()
        for group_id in self._timers.due(now):
            group = self.groups.get(group_id)
            if group is not None:
                self._check(group, now)

    def sweep(self) -> None:
        """Check every group against the clock (what ``expire_due`` does for the groups
        with a deadline due). Idempotent."""
        now = self._clock()
        for group in list(self.groups.values()):
            self._check(group, now)

    def _check(self, group: ConsumerGroup, now: float) -> None:
        for m in list(group.members.values()):
            if now >= m.session_deadline:
                self.remove(group, m, "session timed out")
            elif m.state is MemberState.UNREVOKED_PARTITIONS \
                    and now >= m.revocation_deadline:
                self.remove(group, m, "did not revoke its partitions in time")

    async def run(self) -> None:
        """Check every group each ``BACKSTOP_SWEEP_SECONDS`` (the broker runs this as a
        background task). Deadlines have their own timer; this only bounds how long a
        missed one could wait."""
        while True:
            await asyncio.sleep(BACKSTOP_SWEEP_SECONDS)
            self.sweep()

    # --- commits, deletion --------------------------------------------------------------

    def check_offset_commit(self, group_id: str, member_id: str, member_epoch: int,
                            api_version: int | None,
                            partitions: Iterable[tuple[str, int]]) -> bool:
        """Whether ``group_id`` is a consumer group (False: let the classic rules
        decide); raises UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION (OffsetCommit below v9) or
        STALE_MEMBER_EPOCH as Kafka 4.3 does. ``api_version`` None: a transactional commit
        (TxnOffsetCommit), which any version may make.

        An epoch newer than the member's is stale. An older one (KIP-1251: the member
        was moved to a new epoch and has not heard yet) may commit the ``partitions``
        (topic name, partition) it still owns and already owned at that epoch; any other
        partition makes the whole commit stale."""
        group = self.group(group_id)
        if group is None:
            return False
        if member_epoch < 0 and not group.members:
            return True
        member = group.members.get(member_id)
        if member is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_MEMBER_ID)
        if api_version is not None and api_version < 9:
            raise KafkaProtocolError(ErrorCode.UNSUPPORTED_VERSION)
        if member_epoch == member.member_epoch:
            return True
        if member_epoch > member.member_epoch:
            raise KafkaProtocolError(ErrorCode.STALE_MEMBER_EPOCH)
        topics = self._topics()
        for name, partition in partitions:
            known = topics.get(name)  # an unknown topic answers UNKNOWN_TOPIC_OR_PARTITION
            if known is not None and not member.may_commit(known[0], partition, member_epoch):
                raise KafkaProtocolError(ErrorCode.STALE_MEMBER_EPOCH)
        return True

    def check_offset_fetch(self, group_id: str, member_id: str | None,
                           member_epoch: int) -> None:
        """OffsetFetch v9+ from a member: raises UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH.
        Epoch -1 (admin clients, classic members) is not checked."""
        group = self.group(group_id)
        if group is None or member_epoch == -1:
            return
        member = group.members.get(member_id or "")
        if member is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_MEMBER_ID)
        if member_epoch != member.member_epoch:
            raise KafkaProtocolError(ErrorCode.STALE_MEMBER_EPOCH)

    def delete(self, group_id: str) -> bool:
        """Delete an empty consumer group: True if it was one; raises NON_EMPTY_GROUP."""
        group = self.group(group_id)
        if group is None:
            return False
        if group.members:
            raise KafkaProtocolError(ErrorCode.NON_EMPTY_GROUP)
        group.dead = True
        del self.groups[group_id]
        self._persisted.pop(group_id, None)  # the caller tombstones the records
        return True
