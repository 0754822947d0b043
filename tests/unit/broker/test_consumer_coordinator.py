"""KIP-848 coordinator rules without sockets: epochs, pending revocation, fencing."""

from __future__ import annotations

import uuid

import pytest

from headrace.broker.groups.consumer_coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    Heartbeat,
    HeartbeatResult,
)
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

T = uuid.UUID(int=7)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def coord(clock: Clock) -> ConsumerGroupCoordinator:
    return ConsumerGroupCoordinator(ConsumerGroupConfig(session_timeout_ms=10_000),
                                    lambda: {"t": (T, 4)},
                                    lambda g: False, lambda g: None, clock)


def join(c: ConsumerGroupCoordinator, member: str, instance: str | None = None) -> HeartbeatResult:
    return c.heartbeat(Heartbeat("g", member, 0, instance_id=instance, rebalance_timeout_ms=5000,
                                 subscribed_topic_names=["t"], owned={}))


def beat(c: ConsumerGroupCoordinator, member: str, epoch: int,
         owned: dict[uuid.UUID, frozenset[int]] | None = None) -> HeartbeatResult:
    return c.heartbeat(Heartbeat("g", member, epoch, owned=owned))


def parts(r: HeartbeatResult) -> set[int]:
    assert r.assignment is not None
    return set(r.assignment.get(T, frozenset()))


def test_partition_moves_only_after_revocation(coord: ConsumerGroupCoordinator) -> None:
    a = join(coord, "a")
    assert parts(a) == {0, 1, 2, 3}
    b = join(coord, "b")
    # b is at the new epoch but gets nothing a still owns.
    assert b.member_epoch == a.member_epoch + 1 and parts(b) == set()
    # a is told to keep two: the other two are pending revocation, a keeps its epoch.
    a2 = beat(coord, "a", a.member_epoch)
    kept = parts(a2)
    assert len(kept) == 2 and a2.member_epoch == a.member_epoch
    # b still gets nothing while a has not confirmed the revocation.
    assert beat(coord, "b", b.member_epoch).assignment is None
    a3 = beat(coord, "a", a.member_epoch, {T: frozenset(kept)})
    assert a3.member_epoch == b.member_epoch
    b2 = beat(coord, "b", b.member_epoch)
    assert parts(b2) == {0, 1, 2, 3} - kept


def test_epoch_fencing(coord: ConsumerGroupCoordinator) -> None:
    a = join(coord, "a")
    with pytest.raises(KafkaProtocolError) as e:
        beat(coord, "a", a.member_epoch + 1)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(KafkaProtocolError) as e:
        beat(coord, "zzz", a.member_epoch)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID


def test_session_timeout_moves_partitions(coord: ConsumerGroupCoordinator, clock: Clock) -> None:
    a = join(coord, "a")
    b = join(coord, "b")
    a2 = beat(coord, "a", a.member_epoch)
    beat(coord, "a", a.member_epoch, {T: frozenset(parts(a2))})
    clock.now = 8.0
    beat(coord, "b", b.member_epoch)  # b stays alive, a goes silent
    clock.now = 11.0
    coord.sweep()
    group = coord.group("g")
    assert group is not None and list(group.members) == ["b"]
    b2 = coord.heartbeat(Heartbeat("g", "b", b.member_epoch, owned=None))
    assert parts(b2) == {0, 1, 2, 3}


def test_static_member_rejoins_with_its_assignment(coord: ConsumerGroupCoordinator) -> None:
    a = join(coord, "a", instance="i")
    with pytest.raises(KafkaProtocolError) as e:
        join(coord, "a2", instance="i")
    assert e.value.code == ErrorCode.UNRELEASED_INSTANCE_ID
    left = coord.heartbeat(Heartbeat("g", "a", -2, instance_id="i"))
    assert left.member_epoch == -2
    back = join(coord, "a2", instance="i")
    assert (back.member_epoch, parts(back)) == (a.member_epoch, {0, 1, 2, 3})
    with pytest.raises(KafkaProtocolError) as e:
        coord.heartbeat(Heartbeat("g", "a", a.member_epoch, instance_id="i"))
    assert e.value.code == ErrorCode.FENCED_INSTANCE_ID


def test_subscription_change_bumps_the_group_epoch(clock: Clock) -> None:
    u = uuid.UUID(int=8)
    topics = {"t": (T, 2), "u": (u, 2)}
    coord = ConsumerGroupCoordinator(ConsumerGroupConfig(), lambda: topics,
                                     lambda g: False, lambda g: None, clock)
    a = join(coord, "a")
    assert parts(a) == {0, 1}
    moved = coord.heartbeat(Heartbeat("g", "a", a.member_epoch, subscribed_topic_names=["u"],
                                      owned={T: frozenset({0, 1})}))
    # First the old topic's partitions are revoked (same epoch, empty assignment)...
    assert moved.member_epoch == a.member_epoch and moved.assignment == {}
    # ...and once the member reports them gone it gets the new topic at a new epoch.
    done = coord.heartbeat(Heartbeat("g", "a", a.member_epoch, owned={}))
    assert done.member_epoch == a.member_epoch + 1
    assert done.assignment == {u: frozenset({0, 1})}
    # A partition added to a subscribed topic reaches the member at its next heartbeat.
    topics["u"] = (u, 3)
    grown = beat(coord, "a", done.member_epoch)
    assert grown.member_epoch == done.member_epoch + 1
    assert grown.assignment == {u: frozenset({0, 1, 2})}
