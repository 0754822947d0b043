"""The classic group protocol state machine, driven through ``GroupCoordinator`` on an
asyncio loop with a hand-moved clock (no sockets, no broker).

Joins that wait are asyncio tasks; ``sweep()`` is what the broker runs periodically, so
tests call it after moving the clock to make deadlines (initial rebalance delay,
rebalance timeout, session timeout, sync timeout) pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from headrace.broker.groups.coordinator import GroupConfig, GroupCoordinator, JoinRequest
from headrace.broker.groups.group import Group, GroupState, JoinResult
from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.testing import scaled

DELAY_S = 0.3  # the initial rebalance delay used below
SESSION_MS = 10_000
REBALANCE_MS = 30_000
RANGE = ("range", b"range-metadata")
ROUNDROBIN = ("roundrobin", b"roundrobin-metadata")


class Clock:
    """Stands in for the loop clock the coordinator reads."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Harness:
    """A coordinator with a hand-moved clock, and the join/sync calls tests need."""

    def __init__(self, **config: Any) -> None:
        config.setdefault("initial_rebalance_delay_ms", int(DELAY_S * 1000))
        self.generations: list[tuple[int, str]] = []
        self.coord = GroupCoordinator(GroupConfig(**config), on_generation=self._record)
        self.clock = Clock()
        # The coordinator reads time only through _now(); an instance attribute shadows it.
        self.coord._now = self.clock  # type: ignore[method-assign]

    def _record(self, group: Group) -> None:
        self.generations.append((group.generation_id, group.state.value))

    def group(self, group_id: str = "g") -> Group:
        group = self.coord.group(group_id)
        assert group is not None
        return group

    def join(self, member_id: str = "", group_id: str = "g",
             protocols: list[tuple[str, bytes]] | None = None,
             instance_id: str | None = None, session_ms: int = SESSION_MS,
             rebalance_ms: int = REBALANCE_MS, protocol_type: str = "consumer",
             require_known_member_id: bool = True,
             client_id: str = "client",
             supports_skip_assignment: bool = False) -> asyncio.Task[JoinResult]:
        req = JoinRequest(group_id, member_id, instance_id, session_ms, rebalance_ms,
                          protocol_type, [RANGE] if protocols is None else list(protocols),
                          client_id, "/127.0.0.1",
                          require_known_member_id, supports_skip_assignment)
        return asyncio.get_running_loop().create_task(self.coord.join(req))

    async def new_member_id(self, group_id: str = "g", **kw: Any) -> str:
        """KIP-394: the first JoinGroup without an id answers MEMBER_ID_REQUIRED and an id."""
        r = await self.join(group_id=group_id, **kw)
        assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert r.member_id
        return r.member_id

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             group_id: str = "g", instance_id: str | None = None) -> asyncio.Task[bytes]:
        return asyncio.get_running_loop().create_task(self.coord.sync(
            group_id, generation, member_id, instance_id, None, None, assignments or {}))

    def pass_time(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.coord.sweep()

    async def stable_group(self, n: int, group_id: str = "g",
                           protocols: list[tuple[str, bytes]] | None = None,
                           instance_ids: list[str | None] | None = None) -> list[JoinResult]:
        """n members join together (one generation) and sync; returns their join results,
        leader first. Member i is assigned ``b"a<i>"``."""
        instance_ids = instance_ids or [None] * n
        tasks = []
        for instance in instance_ids:
            member_id = "" if instance else await self.new_member_id(group_id, protocols=protocols)
            tasks.append(self.join(member_id, group_id, protocols=protocols,
                                   instance_id=instance))
        await settle()
        self.pass_time(DELAY_S)
        results = list(await asyncio.gather(*tasks))
        assert all(r.error_code == 0 for r in results), results
        results.sort(key=lambda r: r.member_id != r.leader)
        leader = results[0]
        assignments = {r.member_id: f"a{i}".encode() for i, r in enumerate(results)}
        syncs = [self.sync(r.member_id, r.generation_id, assignments if r is leader else None,
                           group_id, instance) for r, instance in zip(results, instance_ids,
                                                                      strict=True)]
        got = await asyncio.gather(*syncs)
        assert got == [assignments[r.member_id] for r in results]
        assert self.group(group_id).state is GroupState.STABLE
        return results


async def settle() -> None:
    """Let every ready task run until it blocks again."""
    for _ in range(20):
        await asyncio.sleep(0)


def run(scenario: Callable[[Harness], Awaitable[None]], **config: Any) -> None:
    async def main() -> None:
        await scenario(Harness(**config))

    asyncio.run(main())


def raises(code: ErrorCode, call: Callable[[], object]) -> None:
    with pytest.raises(KafkaProtocolError) as e:
        call()
    assert e.value.code == code


async def sync_raises(code: ErrorCode, task: Awaitable[bytes]) -> None:
    with pytest.raises(KafkaProtocolError) as e:
        await task
    assert e.value.code == code


# --- joining ------------------------------------------------------------------------------


def test_member_id_required_then_join_completes_after_the_initial_delay() -> None:
    async def scenario(h: Harness) -> None:
        member_id = await h.new_member_id()
        assert h.group().state is GroupState.EMPTY  # a pending id changes nothing yet
        task = h.join(member_id)
        await settle()
        assert not task.done()
        assert h.group().state is GroupState.PREPARING_REBALANCE
        h.pass_time(DELAY_S / 2)
        await settle()
        assert not task.done(), "completed before the initial rebalance delay"
        h.pass_time(DELAY_S / 2)
        r = await task
        assert (r.error_code, r.generation_id, r.leader, r.member_id) == (0, 1, member_id,
                                                                          member_id)
        assert r.protocol_type == "consumer" and r.protocol_name == "range"
        assert r.members == ((member_id, None, RANGE[1]),)
        assert h.group().state is GroupState.COMPLETING_REBALANCE

    run(scenario)


def test_old_versions_join_without_member_id_required() -> None:
    async def scenario(h: Harness) -> None:
        task = h.join(require_known_member_id=False)
        await settle()
        h.pass_time(DELAY_S)
        r = await task
        assert r.error_code == 0 and r.generation_id == 1 and r.member_id

    run(scenario)


def test_a_join_with_an_id_never_handed_out_is_unknown() -> None:
    async def scenario(h: Harness) -> None:
        r = await h.join("made-up")
        assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID

    run(scenario)


def test_joins_arriving_together_form_one_generation_and_only_the_leader_gets_members() -> None:
    async def scenario(h: Harness) -> None:
        ids = [await h.new_member_id(protocols=[RANGE]) for _ in range(3)]
        tasks = []
        for member_id in ids:
            tasks.append(h.join(member_id))
            await settle()
            h.pass_time(DELAY_S * 0.8)  # each join extends the initial delay
        assert not any(t.done() for t in tasks)
        h.pass_time(DELAY_S * 0.3)
        results = await asyncio.gather(*tasks)
        assert {r.generation_id for r in results} == {1}
        assert {r.leader for r in results} == {ids[0]}
        leader = next(r for r in results if r.member_id == r.leader)
        assert sorted(m for m, _, _ in leader.members) == sorted(ids)
        assert all(r.members == () for r in results if r is not leader)
        assert h.group().generation_id == 1

    run(scenario)


def test_the_initial_delay_is_capped_by_the_rebalance_timeout() -> None:
    async def scenario(h: Harness) -> None:
        first = h.join(await h.new_member_id(rebalance_ms=1000), rebalance_ms=1000)
        await settle()
        for _ in range(5):  # keep extending the delay with new members
            h.join(await h.new_member_id(rebalance_ms=1000), rebalance_ms=1000)
            await settle()
            h.pass_time(DELAY_S * 0.9)
        r = await asyncio.wait_for(first, scaled(10))
        assert r.error_code == 0 and r.generation_id == 1

    run(scenario)


@pytest.mark.parametrize(("members", "expected"), [
    ([[RANGE, ROUNDROBIN], [ROUNDROBIN, RANGE], [ROUNDROBIN, RANGE]], "roundrobin"),
    ([[RANGE, ROUNDROBIN], [RANGE, ROUNDROBIN], [ROUNDROBIN, RANGE]], "range"),
    ([[RANGE, ROUNDROBIN], [ROUNDROBIN]], "roundrobin"),  # the only common one
])
def test_protocol_selection_is_the_most_preferred_common_protocol(
        members: list[list[tuple[str, bytes]]], expected: str) -> None:
    async def scenario(h: Harness) -> None:
        tasks = [h.join(await h.new_member_id(protocols=p), protocols=p) for p in members]
        await settle()
        h.pass_time(DELAY_S)
        results = await asyncio.gather(*tasks)
        assert {r.protocol_name for r in results} == {expected}
        leader = next(r for r in results if r.member_id == r.leader)
        assert {md for _, _, md in leader.members} == {f"{expected}-metadata".encode()}

    run(scenario)


def test_join_refusals() -> None:
    async def scenario(h: Harness) -> None:
        await h.stable_group(1, protocols=[RANGE])
        assert (await h.join(protocols=[ROUNDROBIN])).error_code == \
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await h.join(protocol_type="connect")).error_code == \
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await h.join(group_id="other", protocols=[])).error_code == \
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await h.join(session_ms=999)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await h.join(session_ms=1_800_001)).error_code == \
            ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await h.join(group_id="")).error_code == ErrorCode.INVALID_GROUP_ID
        assert h.group().state is GroupState.STABLE and h.group().generation_id == 1

    run(scenario)


def test_oversized_member_metadata_is_refused_and_changes_nothing() -> None:
    async def scenario(h: Harness) -> None:
        await h.stable_group(1)
        limit = h.coord.config.max_member_metadata_bytes
        big = [("range", b"x" * (limit + 1))]
        r = await h.join(protocols=big)
        assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE
        # Also spread over several protocols, and for a group that does not exist yet.
        split = [("range", b"x" * (limit // 2 + 1)), ("roundrobin", b"x" * (limit // 2 + 1))]
        assert (await h.join(protocols=split)).error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert (await h.join(group_id="new", protocols=big)).error_code == \
            ErrorCode.MESSAGE_TOO_LARGE
        assert h.coord.group("new") is None
        group = h.group()
        assert group.state is GroupState.STABLE and group.generation_id == 1
        assert len(group.members) == 1 and not group.pending_members
        # At the limit it is accepted.
        assert (await h.join(group_id="new", protocols=[("range", b"x" * limit)])
                ).error_code == ErrorCode.MEMBER_ID_REQUIRED

    run(scenario)


def test_group_max_size_counts_pending_members() -> None:
    async def scenario(h: Harness) -> None:
        await h.new_member_id()
        await h.new_member_id()
        assert (await h.join()).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED

    run(scenario, max_size=2)


# --- rebalancing and generation fencing ----------------------------------------------------


def test_generation_fencing_through_a_rebalance() -> None:
    """A member joins a Stable group: the others are told to rejoin; members that do not
    rejoin within the rebalance timeout are removed; old generations are fenced."""

    async def scenario(h: Harness) -> None:
        a, b = await h.stable_group(2)
        h.coord.check_commit("g", 1, b.member_id, None)  # a commit in generation 1 is fine
        c_id = await h.new_member_id()
        c = h.join(c_id)
        await settle()
        group = h.group()
        assert group.state is GroupState.PREPARING_REBALANCE
        # Told to rejoin; generation 1 commits are still accepted while preparing.
        raises(ErrorCode.REBALANCE_IN_PROGRESS, lambda: h.coord.heartbeat("g", 1, a.member_id,
                                                                          None))
        h.coord.check_commit("g", 1, a.member_id, None)
        await sync_raises(ErrorCode.REBALANCE_IN_PROGRESS, h.sync(b.member_id, 1))
        a2 = h.join(a.member_id)
        await settle()
        assert not a2.done() and not c.done()  # waiting for b
        # b keeps heartbeating (so its session lives) but never rejoins.
        for _ in range(6):
            h.pass_time(REBALANCE_MS / 1000 / 6 - 0.01)
            raises(ErrorCode.REBALANCE_IN_PROGRESS,
                   lambda: h.coord.heartbeat("g", 1, b.member_id, None))
        await settle()
        assert not a2.done(), "completed before the rebalance timeout"
        h.pass_time(0.1)
        ra, rc = await a2, await c
        assert (ra.generation_id, rc.generation_id) == (2, 2)
        assert ra.leader == a.member_id and {m for m, _, _ in ra.members} == {a.member_id, c_id}
        assert set(group.members) == {a.member_id, c_id}, "b did not rejoin: removed"
        # b was removed; a's generation 1 is over.
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: h.coord.heartbeat("g", 2, b.member_id, None))
        raises(ErrorCode.ILLEGAL_GENERATION, lambda: h.coord.heartbeat("g", 1, a.member_id,
                                                                       None))
        await sync_raises(ErrorCode.ILLEGAL_GENERATION, h.sync(a.member_id, 1))
        await sync_raises(ErrorCode.UNKNOWN_MEMBER_ID, h.sync(b.member_id, 2))
        # Generation 2 is completing: commits wait for the assignment, heartbeats are fine.
        raises(ErrorCode.REBALANCE_IN_PROGRESS, lambda: h.coord.check_commit(
            "g", 2, a.member_id, None))
        h.coord.heartbeat("g", 2, c_id, None)
        sync_c = h.sync(c_id, 2)
        await settle()
        assert not sync_c.done(), "a follower waits for the leader's assignment"
        assert await h.sync(a.member_id, 2, {a.member_id: b"A", c_id: b"C"}) == b"A"
        assert await sync_c == b"C"
        assert h.group().state is GroupState.STABLE
        h.coord.check_commit("g", 2, c_id, None)
        raises(ErrorCode.ILLEGAL_GENERATION, lambda: h.coord.check_commit("g", 1, c_id, None))
        raises(ErrorCode.ILLEGAL_GENERATION, lambda: h.coord.check_commit("g", 3, c_id, None))
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: h.coord.check_commit("g", 1, b.member_id,
                                                                         None))
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: h.coord.check_commit("g", 2, b.member_id,
                                                                         None))
        # A late SyncGroup of the current generation gets the assignment again.
        assert await h.sync(c_id, 2) == b"C"
        assert h.generations == [(1, "Stable"), (2, "Stable")]

    run(scenario)


def test_a_follower_rejoining_unchanged_gets_the_current_generation_back() -> None:
    async def scenario(h: Harness) -> None:
        _, follower = await h.stable_group(2)
        r = await h.join(follower.member_id)
        assert (r.error_code, r.generation_id, r.members) == (0, 1, ())
        assert h.group().state is GroupState.STABLE
        assert await h.sync(follower.member_id, 1) == b"a1"

    run(scenario)


def test_a_changed_subscription_rebalances() -> None:
    async def scenario(h: Harness) -> None:
        leader, follower = await h.stable_group(2)
        task = h.join(follower.member_id, protocols=[("range", b"new-subscription")])
        await settle()
        assert h.group().state is GroupState.PREPARING_REBALANCE
        assert not task.done()
        raises(ErrorCode.REBALANCE_IN_PROGRESS,
               lambda: h.coord.heartbeat("g", 1, leader.member_id, None))

    run(scenario)


def test_a_joining_member_aborts_a_completing_rebalance() -> None:
    async def scenario(h: Harness) -> None:
        ids = [await h.new_member_id() for _ in range(2)]
        tasks = [h.join(m) for m in ids]
        await settle()
        h.pass_time(DELAY_S)
        results = await asyncio.gather(*tasks)
        follower = next(r for r in results if r.member_id != r.leader)
        waiting = h.sync(follower.member_id, 1)
        await settle()
        h.join(await h.new_member_id())
        await settle()
        await sync_raises(ErrorCode.REBALANCE_IN_PROGRESS, waiting)
        assert h.group().state is GroupState.PREPARING_REBALANCE

    run(scenario)


# --- static membership ---------------------------------------------------------------------


def test_a_restarted_static_member_gets_its_assignment_back_without_a_rebalance() -> None:
    async def scenario(h: Harness) -> None:
        leader, old = await h.stable_group(2, instance_ids=["s-1", "s-2"])
        assert old.member_id != leader.member_id
        # The restarted process joins with no member id (static members skip KIP-394).
        r = await h.join(instance_id="s-2")
        assert r.error_code == 0 and r.member_id != old.member_id
        assert (r.generation_id, r.leader, r.members) == (1, leader.member_id, ())
        group = h.group()
        assert group.state is GroupState.STABLE and group.generation_id == 1
        assert await h.sync(r.member_id, 1, instance_id="s-2") == b"a1"
        # The old incarnation is fenced everywhere.
        raises(ErrorCode.FENCED_INSTANCE_ID,
               lambda: h.coord.heartbeat("g", 1, old.member_id, "s-2"))
        raises(ErrorCode.FENCED_INSTANCE_ID,
               lambda: h.coord.check_commit("g", 1, old.member_id, "s-2"))
        await sync_raises(ErrorCode.FENCED_INSTANCE_ID,
                          h.sync(old.member_id, 1, instance_id="s-2"))
        assert (await h.join(old.member_id, instance_id="s-2")).error_code == \
            ErrorCode.FENCED_INSTANCE_ID
        raises(ErrorCode.FENCED_INSTANCE_ID, lambda: h.coord.leave("g", old.member_id, "s-2"))
        # Without its instance id the old member id is simply unknown.
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: h.coord.heartbeat("g", 1, old.member_id,
                                                                      None))
        # The other member never noticed.
        h.coord.heartbeat("g", 1, leader.member_id, "s-1")
        h.coord.heartbeat("g", 1, r.member_id, "s-2")
        assert h.generations == [(1, "Stable")]

    run(scenario)


@pytest.mark.parametrize("skip", [False, True], ids=["v5", "v9"])
def test_a_restarted_static_leader_gets_its_assignment_back_without_a_rebalance(
        skip: bool) -> None:
    """Kafka's rule (issue 21, librdkafka 0102): the leader id moves to the new member id;
    JoinGroup v9+ tell it that it leads but must skip the assignment, older versions name
    the old leader id so that it syncs as a follower."""

    async def scenario(h: Harness) -> None:
        old, follower = await h.stable_group(2, instance_ids=["s-1", "s-2"])
        assert old.member_id == old.leader
        r = await h.join(instance_id="s-1", supports_skip_assignment=skip)
        assert r.error_code == 0 and r.member_id != old.member_id
        group = h.group()
        assert group.state is GroupState.STABLE and group.generation_id == 1
        assert group.leader_id == r.member_id
        if skip:
            assert (r.generation_id, r.leader, r.skip_assignment) == (1, r.member_id, True)
            assert {m for m, _, _ in r.members} == {r.member_id, follower.member_id}
        else:
            assert (r.generation_id, r.leader, r.skip_assignment) == (1, old.member_id, False)
            assert r.members == ()
        # The leader's SyncGroup of a Stable group returns what it had; no assignment
        # it sends replaces anyone's.
        assert await h.sync(r.member_id, 1, {r.member_id: b"x", follower.member_id: b"y"},
                            instance_id="s-1") == b"a0"
        assert await h.sync(follower.member_id, 1, instance_id="s-2") == b"a1"
        raises(ErrorCode.FENCED_INSTANCE_ID,
               lambda: h.coord.heartbeat("g", 1, old.member_id, "s-1"))
        h.coord.heartbeat("g", 1, follower.member_id, "s-2")
        h.coord.heartbeat("g", 1, r.member_id, "s-1")
        assert h.generations == [(1, "Stable")]
        # The next rebalance is led by the new member id.
        again = h.join(follower.member_id, instance_id="s-2", protocols=[("range", b"new")])
        lead = h.join(r.member_id, instance_id="s-1")
        results = await asyncio.gather(again, lead)
        assert [x.leader for x in results] == [r.member_id] * 2
        assert results[1].members and results[1].generation_id == 2

    run(scenario)


def test_a_static_member_replaced_while_it_waits_for_a_join_is_fenced() -> None:
    async def scenario(h: Harness) -> None:
        _, old = await h.stable_group(2, instance_ids=["s-1", "s-2"])
        # A rebalance starts; the old incarnation rejoins and waits for the leader.
        waiting = h.join(old.member_id, instance_id="s-2", protocols=[("range", b"changed")])
        await settle()
        assert not waiting.done()
        replacement = h.join(instance_id="s-2", protocols=[("range", b"changed")])
        await settle()
        assert (await waiting).error_code == ErrorCode.FENCED_INSTANCE_ID
        assert not replacement.done()
        assert h.group().static_members["s-2"] != old.member_id

    run(scenario)


def test_leave_by_instance_id() -> None:
    async def scenario(h: Harness) -> None:
        await h.stable_group(2, instance_ids=["s-1", "s-2"])
        h.coord.leave("g", "", "s-2")
        group = h.group()
        assert "s-2" not in group.static_members and len(group.members) == 1
        assert group.state is GroupState.PREPARING_REBALANCE
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: h.coord.leave("g", "", "s-2"))

    run(scenario)


# --- timeouts --------------------------------------------------------------------------------


def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    async def scenario(h: Harness) -> None:
        a, b = await h.stable_group(2)
        for _ in range(3):  # a heartbeats, b stays silent
            h.pass_time(3.0)
            h.coord.heartbeat("g", 1, a.member_id, None)
        group = h.group()
        assert group.state is GroupState.STABLE and len(group.members) == 2, \
            "expired before the session timeout"
        h.pass_time(SESSION_MS / 1000 - 9.0 + 0.01)
        assert set(group.members) == {a.member_id}
        assert h.group().state is GroupState.PREPARING_REBALANCE
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: h.coord.heartbeat("g", 1, b.member_id, None))
        raises(ErrorCode.REBALANCE_IN_PROGRESS,
               lambda: h.coord.heartbeat("g", 1, a.member_id, None))

    run(scenario)


def test_a_lookup_at_a_session_deadline_finds_the_member_gone() -> None:
    """Deadlines apply before any lookup, whatever the timer does: a request handled at a
    member's deadline (no sweep in between) never sees the member."""

    async def scenario(h: Harness) -> None:
        a, b = await h.stable_group(2)
        h.clock.advance(1.0)
        h.coord.heartbeat("g", 1, a.member_id, None)
        h.clock.advance(SESSION_MS / 1000 - 1.0)  # exactly b's deadline
        group = h.group()
        assert set(group.members) == {a.member_id}
        assert group.state is GroupState.PREPARING_REBALANCE
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: h.coord.heartbeat("g", 1, b.member_id, None))

    run(scenario)


def test_a_commit_keeps_a_session_alive() -> None:
    async def scenario(h: Harness) -> None:
        (a,) = await h.stable_group(1)
        for _ in range(4):
            h.pass_time(SESSION_MS / 1000 / 2)
            h.coord.check_commit("g", 1, a.member_id, None)
        assert a.member_id in h.group().members

    run(scenario)


def test_the_last_member_expiring_empties_the_group() -> None:
    async def scenario(h: Harness) -> None:
        await h.stable_group(1)
        h.pass_time(SESSION_MS / 1000 + 0.01)
        group = h.group()
        assert group.state is GroupState.EMPTY and not group.members
        assert group.generation_id == 2 and group.protocol_name is None
        assert h.generations[-1] == (2, "Empty")

    run(scenario)


def test_pending_member_ids_expire() -> None:
    async def scenario(h: Harness) -> None:
        pending = await h.new_member_id()
        h.pass_time(SESSION_MS / 1000 + 0.01)
        assert not h.group().pending_members
        assert (await h.join(pending)).error_code == ErrorCode.UNKNOWN_MEMBER_ID

    run(scenario)


def test_a_pending_member_id_holds_the_rebalance_until_it_joins_or_expires() -> None:
    async def scenario(h: Harness) -> None:
        joined = h.join(await h.new_member_id())
        await h.new_member_id(session_ms=2000)  # never comes back
        await settle()
        h.pass_time(DELAY_S)
        await settle()
        assert not joined.done(), "completed without the pending member"
        h.pass_time(2.0)
        r = await joined
        assert r.error_code == 0 and r.generation_id == 1

    run(scenario)


def test_members_awaiting_a_join_are_not_expired_by_their_session() -> None:
    async def scenario(h: Harness) -> None:
        a, b = await h.stable_group(2)
        rejoin = h.join(a.member_id, session_ms=1000, protocols=[("range", b"changed")])
        await settle()
        for _ in range(3):  # b keeps heartbeating (and is told to rejoin); a just waits
            h.pass_time(0.9)
            raises(ErrorCode.REBALANCE_IN_PROGRESS,
                   lambda: h.coord.heartbeat("g", 1, b.member_id, None))
        assert a.member_id in h.group().members
        assert not rejoin.done()

    run(scenario)


def test_leader_sync_timeout_restarts_the_rebalance_without_the_silent_leader() -> None:
    # A rebalance timeout shorter than the session (the other case is tested below).
    rebalance_ms = SESSION_MS // 2

    async def scenario(h: Harness) -> None:
        ids = [await h.new_member_id(rebalance_ms=rebalance_ms) for _ in range(2)]
        tasks = [h.join(m, rebalance_ms=rebalance_ms) for m in ids]
        await settle()
        h.pass_time(DELAY_S)
        results = await asyncio.gather(*tasks)
        leader = next(r for r in results if r.member_id == r.leader)
        follower = next(r for r in results if r is not leader)
        waiting = h.sync(follower.member_id, 1)
        await settle()
        # The leader heartbeats (its session lives) but never sends its SyncGroup.
        for _ in range(2):
            h.pass_time(rebalance_ms / 1000 / 2 - 0.01)
            h.coord.heartbeat("g", 1, leader.member_id, None)
        await settle()
        assert not waiting.done(), "gave up before the rebalance timeout"
        h.pass_time(0.1)
        await sync_raises(ErrorCode.REBALANCE_IN_PROGRESS, waiting)
        group = h.group()
        assert set(group.members) == {follower.member_id}
        assert group.state is GroupState.PREPARING_REBALANCE
        raises(ErrorCode.UNKNOWN_MEMBER_ID,
               lambda: h.coord.heartbeat("g", 1, leader.member_id, None))

    run(scenario)


# --- leaving and deleting --------------------------------------------------------------------


def test_leave_group() -> None:
    async def scenario(h: Harness) -> None:
        a, b = await h.stable_group(2)
        h.coord.leave("g", b.member_id, None)
        group = h.group()
        assert set(group.members) == {a.member_id}
        assert group.state is GroupState.PREPARING_REBALANCE
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: h.coord.leave("g", b.member_id, None))
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: h.coord.leave("nope", "x", None))
        h.coord.leave("g", a.member_id, None)
        assert h.group().state is GroupState.EMPTY and group.generation_id == 2

    run(scenario)


def test_leaving_while_others_wait_completes_the_rebalance_for_them() -> None:
    async def scenario(h: Harness) -> None:
        a, b = await h.stable_group(2)
        rejoin = h.join(a.member_id, protocols=[("range", b"changed")])
        await settle()
        assert not rejoin.done()
        h.coord.leave("g", b.member_id, None)
        r = await asyncio.wait_for(rejoin, scaled(10))
        assert (r.error_code, r.generation_id, r.leader) == (0, 2, a.member_id)
        assert [m for m, _, _ in r.members] == [a.member_id]

    run(scenario)


def test_a_member_leaving_while_it_waits_for_its_join_gets_unknown_member() -> None:
    async def scenario(h: Harness) -> None:
        member_id = await h.new_member_id()
        task = h.join(member_id)
        await settle()
        h.coord.leave("g", member_id, None)
        assert (await task).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        h.pass_time(DELAY_S)
        assert h.group().state is GroupState.EMPTY

    run(scenario)


def test_delete_groups() -> None:
    async def scenario(h: Harness) -> None:
        raises(ErrorCode.GROUP_ID_NOT_FOUND, lambda: h.coord.delete("unknown"))
        (a,) = await h.stable_group(1)
        raises(ErrorCode.NON_EMPTY_GROUP, lambda: h.coord.delete("g"))
        h.coord.leave("g", a.member_id, None)
        h.coord.delete("g")
        assert h.coord.group("g") is None
        raises(ErrorCode.GROUP_ID_NOT_FOUND, lambda: h.coord.delete("g"))
        # The id can be used again, from generation 0.
        task = h.join(await h.new_member_id())
        await settle()
        h.pass_time(DELAY_S)
        assert (await task).generation_id == 1

    run(scenario)


def test_a_rebalancing_group_cannot_be_deleted() -> None:
    async def scenario(h: Harness) -> None:
        h.join(await h.new_member_id())
        await settle()
        assert h.group().state is GroupState.PREPARING_REBALANCE
        raises(ErrorCode.NON_EMPTY_GROUP, lambda: h.coord.delete("g"))

    run(scenario)


# --- offset commit rules ---------------------------------------------------------------------


def test_check_commit_rules() -> None:
    async def scenario(h: Harness) -> None:
        check = h.coord.check_commit
        # Simple (groupless) commits: generation -1 and no member id, while nobody is in.
        check("unknown-group", -1, "", None)
        raises(ErrorCode.INVALID_GROUP_ID, lambda: check("", -1, "", None))
        (a,) = await h.stable_group(1, instance_ids=["s-1"])
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: check("g", -1, "", None))
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: check("g", 1, "stranger", None))
        raises(ErrorCode.FENCED_INSTANCE_ID, lambda: check("g", 1, "stranger", "s-1"))
        raises(ErrorCode.ILLEGAL_GENERATION, lambda: check("g", 0, a.member_id, "s-1"))
        check("g", 1, a.member_id, "s-1")
        check("g", 1, a.member_id, None)
        h.coord.leave("g", a.member_id, "s-1")
        assert h.group().state is GroupState.EMPTY
        check("g", -1, "", None)  # the group is empty again: simple commits are allowed
        raises(ErrorCode.UNKNOWN_MEMBER_ID, lambda: check("g", 1, a.member_id, None))

    run(scenario)


def test_a_follower_with_an_unknown_protocol_type_is_refused_sync() -> None:
    async def scenario(h: Harness) -> None:
        _, b = await h.stable_group(2)
        task = asyncio.get_running_loop().create_task(h.coord.sync(
            "g", 1, b.member_id, None, "connect", "range", {}))
        await sync_raises(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, task)
        task = asyncio.get_running_loop().create_task(h.coord.sync(
            "g", 1, b.member_id, None, "consumer", "roundrobin", {}))
        await sync_raises(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, task)
        await sync_raises(ErrorCode.UNKNOWN_MEMBER_ID, h.sync(b.member_id, 1, group_id="nope"))

    run(scenario)


@pytest.mark.parametrize("path", ["rejoin", "pending-member-joins-last", "no-initial-delay",
                                  "static-leader-replaced"])
def test_the_member_completing_a_rebalance_gets_its_join_response(path: str) -> None:
    """The join that completes a rebalance inline (no initial delay applies, everyone else
    has joined) gets its response too (it once raised TypeError: the coordinator awaited
    ``member.join_future`` after completing the rebalance had reset it to None)."""

    async def scenario(h: Harness) -> None:
        if path == "rejoin":
            (a,) = await h.stable_group(1)
            # The leader rejoining a Stable group rebalances; it is the only member, so
            # its own join completes the rebalance.
            r = await h.join(a.member_id)
            assert (r.generation_id, r.leader) == (2, a.member_id)
        elif path == "pending-member-joins-last":
            (a,) = await h.stable_group(1)
            last = await h.new_member_id()
            # a rejoins with a new subscription; the rebalance waits for the pending id.
            waiting = h.join(a.member_id, protocols=[("range", b"changed")])
            await settle()
            assert not waiting.done()
            r = await h.join(last)
            assert r.generation_id == 2 and (await waiting).generation_id == 2
        elif path == "no-initial-delay":
            h.coord.config = GroupConfig(initial_rebalance_delay_ms=0)
            r = await h.join(await h.new_member_id())
            assert r.generation_id == 1
        else:
            (old,) = await h.stable_group(1, instance_ids=["s-1"])
            # The restarted static leader, with a new subscription: that rebalances.
            r = await h.join(instance_id="s-1", protocols=[("range", b"changed")])
            assert r.generation_id == 2 and r.member_id != old.member_id
            assert r.leader == r.member_id
        assert r.error_code == 0

    run(scenario)


# --- known bugs --------------------------------------------------------------------------------


def test_a_follower_whose_sync_wait_is_aborted_may_still_rejoin() -> None:
    async def scenario(h: Harness) -> None:
        ids = [await h.new_member_id() for _ in range(2)]
        tasks = [h.join(m) for m in ids]
        await settle()
        h.pass_time(DELAY_S)
        results = await asyncio.gather(*tasks)
        leader = next(r for r in results if r.member_id == r.leader)
        follower = next(r for r in results if r is not leader)
        waiting = h.sync(follower.member_id, 1)
        await settle()
        for _ in range(5):  # the leader heartbeats but its SyncGroup never comes
            h.pass_time(REBALANCE_MS / 1000 / 6)
            h.coord.heartbeat("g", 1, leader.member_id, None)
        h.pass_time(REBALANCE_MS / 1000 / 6 + 0.1)
        await sync_raises(ErrorCode.REBALANCE_IN_PROGRESS, waiting)
        assert follower.member_id in h.group().members, "expired while it waited for the leader"

    run(scenario)


def test_commits_from_fenced_members_are_fenced_while_a_rebalance_completes() -> None:
    async def scenario(h: Harness) -> None:
        a, b = await h.stable_group(2)
        task = h.join(a.member_id, protocols=[("range", b"changed")])
        await settle()
        h.coord.leave("g", b.member_id, None)  # the rebalance completes: generation 2
        await task
        assert h.group().state is GroupState.COMPLETING_REBALANCE
        raises(ErrorCode.REBALANCE_IN_PROGRESS,
               lambda: h.coord.check_commit("g", 2, a.member_id, None))
        raises(ErrorCode.ILLEGAL_GENERATION,
               lambda: h.coord.check_commit("g", 1, a.member_id, None))
        raises(ErrorCode.UNKNOWN_MEMBER_ID,
               lambda: h.coord.check_commit("g", 1, b.member_id, None))

    run(scenario)


def test_a_join_refused_for_an_unknown_member_creates_no_group() -> None:
    async def scenario(h: Harness) -> None:
        r = await h.join("made-up", group_id="never-created")
        assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert h.coord.group("never-created") is None

    run(scenario)
