"""Loads: snapshot + tail against full replays, time travel against brute-force folds,
upcasting of old events, and subscriptions (catch-up, live, checkpoint)."""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headrace.eventsourcing import EventStore, EventTypes, Repository, StoredEvent, Subscription
from headrace.pipelines.bank.domain import Account, CommandRejected, Deposited, Withdrawn
from headrace.testing import scaled
from tests.conftest import AnyBroker
from tests.eventsourcing.conftest import fold

operations = st.lists(st.tuples(st.booleans(), st.integers(1, 50)), min_size=1, max_size=40)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, every=st.integers(1, 9))
def test_snapshot_plus_tail_equals_full_replay(store: EventStore, ops: list[tuple[bool, int]],
                                               every: int) -> None:
    repo = Repository(store, Account, snapshot_every=every)
    name = f"acc-{uuid.uuid4().hex[:8]}"
    repo.execute(name, lambda a: a.open("ann"))
    for deposit, amount in ops:
        with contextlib.suppress(CommandRejected):
            repo.execute(name, lambda a, d=deposit, m=amount: a.deposit(m) if d else a.withdraw(m))
    full = repo.load(name, use_snapshot=False)
    snap = store.snapshot(name)
    assert (snap is not None) == (full.version >= every)
    assert vars(repo.load(name)) == vars(full) == vars(fold(store.read(name)))
    for version in range(full.version + 1):  # as of every version, with or without snapshot
        assert vars(repo.load(name, version=version)) == vars(
            repo.load(name, version=version, use_snapshot=False))
    # The same from the log itself: another store (a new process) that caches nothing.
    with EventStore(store.config["bootstrap.servers"], store.topic, store.types,
                    cache_events=0, timeout=scaled(30)) as cold:
        uncached = Repository(cold, Account, snapshot_every=every)
        assert vars(uncached.load(name)) == vars(full)
        assert vars(uncached.load(name, use_snapshot=False)) == vars(full)
        assert vars(uncached.load(name, version=full.version // 2)) == vars(
            repo.load(name, version=full.version // 2))


def test_as_of_a_time_equals_a_brute_force_fold(store: EventStore) -> None:
    repo = Repository(store, Account, snapshot_every=4)
    repo.execute("acc-t", lambda a: a.open("ann"))
    for i in range(12):
        time.sleep(0.004)  # distinct milliseconds, so every boundary is tested
        repo.execute("acc-t", lambda a, i=i: a.deposit(i + 1) if i % 3 else a.withdraw(1)
                     if a.balance else a.deposit(5))
    events = store.read("acc-t")
    assert len(events) == 13
    for ev in events:
        for at in (ev.recorded_at - 1, ev.recorded_at, ev.recorded_at + 1):
            expected = [e for e in events if e.recorded_at <= at]
            got = repo.load("acc-t", at=at)
            assert (got.version, got.balance) == (len(expected),
                                                  fold(expected).balance if expected else 0)
    assert repo.load("acc-t", at=events[0].recorded_at - 1).version == 0


def test_old_events_are_upcast(store: EventStore, any_broker: AnyBroker) -> None:
    # The code of an earlier release: deposits had no reference.
    old_types = EventTypes()

    @old_types.register("AccountOpened")
    @dataclass(frozen=True)
    class Opened:
        owner: str

    @old_types.register("MoneyDeposited")
    @dataclass(frozen=True)
    class DepositedV1:
        amount: int

    with EventStore(any_broker.bootstrap_servers, store.topic, old_types,
                    timeout=scaled(30)) as old:
        old.append("acc-u", [Opened("ann"), DepositedV1(70)], expected_version=0,
                   aggregate_type="Account")
    repo = Repository(store, Account)
    repo.execute("acc-u", lambda a: a.withdraw(20, "rent"))
    events = store.read("acc-u")
    assert [(e.type, e.schema) for e in events] == [
        ("AccountOpened", 1), ("MoneyDeposited", 1), ("MoneyWithdrawn", 2)]
    assert [store.types.decode(e) for e in events[1:]] == [
        Deposited(70, "(before references)"), Withdrawn(20, "rent")]
    assert repo.load("acc-u").balance == 50


def drain(sub: Subscription, want: int, timeout: float = 20.0) -> list[StoredEvent]:
    got: list[StoredEvent] = []
    deadline = time.monotonic() + scaled(timeout)
    while len(got) < want and time.monotonic() < deadline:
        got += [stored for stored, _event in sub.poll(0.5)]
    return got


def test_subscription_catches_up_goes_live_and_resumes(store: EventStore) -> None:
    repo = Repository(store, Account)
    for name in ("s-1", "s-2", "s-3"):
        repo.execute(name, lambda a, n=name: a.open(n))
        repo.execute(name, lambda a: a.deposit(10))
    group = f"projection-{uuid.uuid4().hex[:6]}"
    with Subscription(store, group) as sub:
        history = drain(sub, 6)
        assert sorted((e.aggregate_id, e.version) for e in history) == [
            (n, v) for n in ("s-1", "s-2", "s-3") for v in (1, 2)]
        repo.execute("s-2", lambda a: a.withdraw(4))  # live
        live = drain(sub, 1)
        assert [(e.aggregate_id, e.version, e.type) for e in live] == [
            ("s-2", 3, "MoneyWithdrawn")]
        sub.checkpoint()
    repo.execute("s-1", lambda a: a.deposit(1))
    with Subscription(store, group) as resumed:
        after = drain(resumed, 1)
        assert [(e.aggregate_id, e.version) for e in after] == [("s-1", 3)]
        assert resumed.poll(0.5) == []  # nothing before the checkpoint comes again
