"""Consumer-group administration through confluent-kafka's ``AdminClient``.

Blocking, fail-fast and error contracts: ``headrace.ops.admin``. Nothing is cached, so a
describe is a snapshot (a member may join or commit between its requests).

Offsets follow Kafka's meaning throughout: a committed offset is the next record the group
will read, the log end offset is the offset the next produced record will get, and the lag
of a partition is ``log_end_offset - committed``.

librdkafka lists and describes only groups of protocol type ``consumer`` and "simple" groups
(committed offsets, no protocol: e.g. written by ``reset-offsets`` or by consumers that
assign partitions themselves); Kafka Connect and other protocol types are left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    TopicPartition,
)
from confluent_kafka.admin import ClusterMetadata

from headrace.ops.admin import AdminSession, KnownErrors, TopicPart, translate
from headrace.ops.clients import error_text
from headrace.ops.errors import GroupActiveError, KafkaRequestError, OpsError, UnknownGroupError

# Kafka's names for the classic group states, as its own tools print them.
_STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
# States in which a group has no live member, so its offsets may be rewritten.
INACTIVE_STATES = frozenset({"Empty", "Dead"})
# What a commit from outside the group is refused with while members are live.
_ACTIVE_GROUP_ERRORS = frozenset(
    {KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION}
)


@dataclass(frozen=True)
class GroupSummary:
    """One line of ``groups list``; ``protocol_type`` is "" for a simple group."""

    group_id: str
    state: str
    protocol_type: str


@dataclass(frozen=True)
class MemberInfo:
    """A live member and the partitions the group's leader assigned to it."""

    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    partitions: tuple[TopicPart, ...]


@dataclass(frozen=True)
class PartitionLag:
    """Position of the group on one partition; None where the value is not known.

    ``committed`` is None when the group never committed there; ``log_end_offset`` when the
    partition no longer exists; ``member_id`` when no live member owns the partition.
    """

    topic: str
    partition: int
    committed: int | None
    log_end_offset: int | None
    member_id: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.committed


@dataclass(frozen=True)
class GroupDescription:
    """What ``groups describe`` shows: members in the broker's order, partitions sorted."""

    group_id: str
    state: str
    protocol_type: str
    assignor: str
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionLag, ...]

    @property
    def total_lag(self) -> int:
        """Sum of the lags that are known (partitions with a committed offset)."""
        return sum(p.lag for p in self.partitions if p.lag is not None)


class GroupAdmin(AdminSession):
    """Group operations against the cluster reachable at ``bootstrap_servers``."""

    def list_groups(self) -> list[GroupSummary]:
        """Every consumer and simple group the cluster knows, Empty ones included, by id."""
        self.metadata()
        future = self._admin.list_consumer_groups(request_timeout=self._timeout)
        result = self._call(future, "listing groups")
        if result.errors:
            raise KafkaRequestError(f"listing groups failed: {result.errors[0]}")
        return sorted(
            (
                GroupSummary(
                    group_id=g.group_id,
                    state=_state_name(getattr(g, "state", None)),
                    protocol_type="" if g.is_simple_consumer_group else "consumer",
                )
                for g in result.valid or []
            ),
            key=lambda g: g.group_id,
        )

    def state(self, group_id: str) -> str:
        """The group's state by Kafka's name ("Dead" for a group the broker does not know)."""
        self.metadata()
        return _state_name(self._describe(group_id).state)

    def describe(self, group_id: str) -> GroupDescription:
        """State, members and per-partition lag of ``group_id``.

        Partitions shown: those assigned to a live member and those with a committed offset.
        ``UnknownGroupError`` when the group has neither members nor committed offsets and
        the broker calls it Dead (Kafka's answer for a group it does not know).
        """
        metadata = self.metadata()
        described = self._describe(group_id)
        committed = self.committed(group_id)
        state = _state_name(described.state)
        if state in ("Dead", "Unknown") and not described.members and not committed:
            raise UnknownGroupError(f"group {group_id!r} does not exist")
        members = tuple(
            MemberInfo(
                member_id=m.member_id,
                client_id=m.client_id,
                host=m.host,
                group_instance_id=m.group_instance_id,
                partitions=tuple(sorted((tp.topic, tp.partition) for tp in _assigned(m))),
            )
            for m in described.members
        )
        owners = {tp: m.member_id for m in members for tp in m.partitions}
        wanted = sorted(set(owners) | set(committed))
        existing = [tp for tp in wanted if _exists(metadata, tp)]
        ends = self.list_offsets(existing, "latest") if existing else {}
        partitions = tuple(
            PartitionLag(tp[0], tp[1], committed.get(tp), ends.get(tp), owners.get(tp))
            for tp in wanted
        )
        return GroupDescription(
            group_id=group_id,
            state=state,
            protocol_type="" if described.is_simple_consumer_group else "consumer",
            assignor=described.partition_assignor or "",
            members=members,
            partitions=partitions,
        )

    def committed(
        self, group_id: str, partitions: Iterable[TopicPart] | None = None
    ) -> dict[TopicPart, int]:
        """The group's committed offsets (of ``partitions``, default all); missing = none."""
        request = ConsumerGroupTopicPartitions(
            group_id,
            None if partitions is None else [TopicPartition(t, p) for t, p in partitions],
        )
        what = f"reading the committed offsets of group {group_id!r}"
        result = self._call_coordinated(
            lambda: self._admin.list_consumer_group_offsets(
                [request], request_timeout=self._timeout)[group_id],
            what, _group_errors(group_id))
        offsets: dict[TopicPart, int] = {}
        for tp in result.topic_partitions or []:
            _check_partition(tp, what)
            if tp.offset >= 0:
                offsets[(tp.topic, tp.partition)] = tp.offset
        return offsets

    def alter_offsets(self, group_id: str, offsets: dict[TopicPart, int]) -> None:
        """Commit ``offsets`` for the group from outside it (Kafka's AlterConsumerGroupOffsets).

        Only an inactive group accepts them: ``GroupActiveError`` if members are live.
        Idempotent: committing the same offsets twice changes nothing more.
        """
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        )
        futures = self._admin.alter_consumer_group_offsets([request], request_timeout=self._timeout)
        what = f"committing offsets for group {group_id!r}"
        known = _group_errors(group_id, active=_active(group_id))
        result = self._call(futures[group_id], what, known)
        for tp in result.topic_partitions or []:
            _check_partition(tp, what, known)

    def delete(self, group_id: str) -> None:
        """Delete an inactive group and its committed offsets.

        ``UnknownGroupError`` if it does not exist, ``GroupActiveError`` if it has members.
        """
        self.metadata()
        futures = self._admin.delete_consumer_groups([group_id], request_timeout=self._timeout)
        active = f"group {group_id!r} has live members; stop its consumers before deleting it"
        known = _group_errors(group_id, active=active)
        self._call(futures[group_id], f"deleting group {group_id!r}", known)

    def _describe(self, group_id: str) -> Any:
        return self._call_coordinated(
            lambda: self._admin.describe_consumer_groups(
                [group_id], request_timeout=self._timeout)[group_id],
            f"describing group {group_id!r}", _group_errors(group_id))


def _group_errors(group_id: str, active: str | None = None) -> KnownErrors:
    """What Kafka's group error codes mean for ``group_id``. ``active`` is the message for a
    request refused because the group has live members (None: no such refusal expected)."""
    known: dict[int, OpsError] = {
        KafkaError.GROUP_ID_NOT_FOUND: UnknownGroupError(f"group {group_id!r} does not exist")
    }
    if active is not None:
        refused = GroupActiveError(active)
        known.update(dict.fromkeys((KafkaError.NON_EMPTY_GROUP, *_ACTIVE_GROUP_ERRORS), refused))
    return known


def _check_partition(tp: TopicPartition, what: str, known: KnownErrors | None = None) -> None:
    """Raise for the error a group request reported on one partition (``known`` first)."""
    if tp.error is not None:
        message = f"{what}: {tp.topic}-{tp.partition}: {error_text(tp.error)}"
        raise translate(tp.error.code(), known, message)


def _active(group_id: str) -> str:
    return (
        f"group {group_id!r} has live members; offsets can only be reset while it is "
        "inactive (Empty): stop its consumers first"
    )


def _state_name(state: ConsumerGroupState | None) -> str:
    return _STATE_NAMES.get(state, "Unknown") if state is not None else "Unknown"


def _assigned(member: Any) -> list[TopicPartition]:
    assignment = member.assignment
    return list(assignment.topic_partitions) if assignment is not None else []


def _exists(metadata: ClusterMetadata, tp: TopicPart) -> bool:
    topic = metadata.topics.get(tp[0])
    return topic is not None and topic.error is None and tp[1] in topic.partitions
