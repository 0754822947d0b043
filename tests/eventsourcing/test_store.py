"""Expected-version appends, idempotent commands and the topic layout, on both brokers."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.eventsourcing import (
    ConcurrencyError,
    EventSourcingError,
    EventStore,
    EventTypeError,
    Repository,
    StoredEvent,
    StoreError,
    Subscription,
)
from headrace.pipelines.bank.domain import (
    Account,
    CommandRejected,
    Deposited,
    Opened,
    Withdrawn,
    bank_events,
)
from headrace.testing import scaled
from tests.conftest import AnyBroker
from tests.eventsourcing.conftest import by_aggregate, fold, log_events


def test_append_checks_the_expected_version(store: EventStore) -> None:
    first = store.append("acc-1", [Opened("ann"), Deposited(100)], expected_version=0,
                         aggregate_type="Account")
    assert (first.first_version, first.last_version, first.duplicate) == (1, 2, False)
    assert first.partition == store.partition_of("acc-1")
    with pytest.raises(ConcurrencyError, match="expected version 1, but it is at version 2"):
        store.append("acc-1", [Withdrawn(5)], expected_version=1)
    with pytest.raises(ConcurrencyError, match="expected version 7, but it is at version 2"):
        store.append("acc-1", [Withdrawn(5)], expected_version=7)
    with pytest.raises(ConcurrencyError, match="expected version 0"):
        store.append("acc-1", [Opened("bob")], expected_version=0)
    assert store.append("acc-1", [Withdrawn(5)], expected_version=2).last_version == 3
    assert store.append("acc-1", [Deposited(1)], expected_version=None).last_version == 4
    events = store.read("acc-1")
    assert [(e.version, e.type, e.data) for e in events] == [
        (1, "AccountOpened", {"owner": "ann"}), (2, "MoneyDeposited", {"amount": 100, "reference": ""}),
        (3, "MoneyWithdrawn", {"amount": 5, "reference": ""}),
        (4, "MoneyDeposited", {"amount": 1, "reference": ""})]
    assert all(e.aggregate_type == "Account" for e in events[:2])
    times = [e.recorded_at for e in events]
    assert times == sorted(times)
    with pytest.raises(EventSourcingError, match="at least one event"):
        store.append("acc-1", [], expected_version=4)
    with pytest.raises(EventTypeError):
        store.append("acc-1", ["not an event"], expected_version=4)


def test_a_command_id_applies_once(store: EventStore, any_broker: AnyBroker) -> None:
    a = store.append("acc-2", [Opened("ann")], expected_version=0, command_id="open")
    again = store.append("acc-2", [Opened("ann")], expected_version=0, command_id="open")
    assert again.duplicate and (again.first_version, again.offsets) == (1, a.offsets)
    store.append("acc-2", [Deposited(3)], expected_version=1, command_id="dep")
    # A stale expected version does not matter for a repeat: it was applied, it stays applied.
    assert store.append("acc-2", [Deposited(3)], expected_version=1, command_id="dep").duplicate
    assert store.command_result("acc-2", "dep") is not None
    assert store.command_result("acc-2", "never") is None
    assert [e.version for e in log_events(any_broker.bootstrap_servers, store.topic)] == [1, 2]


def withdraw(store: EventStore, expected: int, start: threading.Barrier, wins: list[int],
             losses: list[ConcurrencyError]) -> None:
    start.wait()
    try:
        wins.append(store.append("acc-3", [Withdrawn(10)], expected_version=expected).last_version)
    except ConcurrencyError as lost:
        losses.append(lost)


def test_racing_threads_exactly_one_wins_per_version(store: EventStore) -> None:
    store.append("acc-3", [Opened("ann"), Deposited(1000)], expected_version=0)
    for round_ in range(5):
        start = threading.Barrier(8)
        wins: list[int] = []
        losses: list[ConcurrencyError] = []
        threads = [threading.Thread(target=withdraw, args=(store, 2 + round_, start, wins,
                                                           losses)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wins == [3 + round_] and len(losses) == 7
        assert {e.actual for e in losses} == {3 + round_}
    assert [e.version for e in store.read("acc-3")] == list(range(1, 8))


def test_commands_through_the_repository(accounts: Repository[Account]) -> None:
    acc, result = accounts.execute("acc-4", lambda a: a.open("ann"), command_id="o")
    assert result is not None and (acc.version, acc.is_open) == (1, True)
    acc, _ = accounts.execute("acc-4", lambda a: a.deposit(50), command_id="d1")
    with pytest.raises(CommandRejected, match="would overdraw"):
        accounts.execute("acc-4", lambda a: a.withdraw(80), command_id="w1")
    acc, _ = accounts.execute("acc-4", lambda a: a.withdraw(30), command_id="w2")
    # Repeating an applied command that would now be rejected returns its first result.
    again, result = accounts.execute("acc-4", lambda a: a.withdraw(30), command_id="w2")
    assert result is not None and result.duplicate and again.balance == 20
    assert accounts.load("acc-4").balance == 20 == acc.balance
    assert accounts.load("nobody").version == 0


def test_existing_topics_that_could_lose_events_are_refused(any_broker: AnyBroker,
                                                            topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": any_broker.bootstrap_servers})
    topics = {f"{topic_name}-c": {"cleanup.policy": "compact"},
              f"{topic_name}-r": {"retention.ms": "86400000"}}
    for f in admin.create_topics([NewTopic(t, 2, 1, config=c)
                                  for t, c in topics.items()]).values():
        f.result(scaled(10))
    with pytest.raises(StoreError, match=r"cleanup\.policy=compact"):
        EventStore(any_broker.bootstrap_servers, f"{topic_name}-c", bank_events).start()
    with pytest.raises(StoreError, match=r"retention\.ms=86400000"):
        EventStore(any_broker.bootstrap_servers, f"{topic_name}-r", bank_events).start()
    # An existing event topic keeps its partition count.
    admin.create_topics([NewTopic(f"{topic_name}-ok", 3, 1, config={"retention.ms": "-1"})])[
        f"{topic_name}-ok"].result(scaled(10))
    with EventStore(any_broker.bootstrap_servers, f"{topic_name}-ok", bank_events,
                    partitions=8, timeout=scaled(30)) as s:
        assert s.partitions == 3


def test_two_stores_on_one_topic_take_turns(store: EventStore, any_broker: AnyBroker) -> None:
    """Two store instances (as two processes would) writing the same aggregates alternately:
    each write fences the other writer, which catches up before it decides again."""
    with EventStore(any_broker.bootstrap_servers, store.topic, bank_events,
                    timeout=scaled(30)) as other:
        one, two = Repository(store, Account), Repository(other, Account)
        one.execute("acc-5", lambda a: a.open("ann"))
        for i in range(10):
            repo = one if i % 2 else two
            # Another process's commit may reach this one's reads a moment late (Kafka
            # writes commit markers after acknowledging): a conflict, then retried.
            repo.execute("acc-5", lambda a: a.deposit(10), command_id=f"d{i}", retries=5)
        # A stale decision from the fenced side is refused, not written.
        stale = one.load("acc-5")
        two.execute("acc-5", lambda a: a.withdraw(100))
        with pytest.raises(ConcurrencyError):
            store.append("acc-5", [Withdrawn(100)], expected_version=stale.version)
    events = by_aggregate(log_events(any_broker.bootstrap_servers, store.topic))["acc-5"]
    assert [e.version for e in events] == list(range(1, 13))
    assert fold(events).balance == 0


def forge(store: EventStore, aggregate_id: str, version: int, amount: int,
          partition: int | None = None) -> int:
    """Write a deposit of ``version`` with a plain producer, as a writer other than the
    store would; its offset."""
    envelope = StoredEvent(aggregate_id, "Account", version, "MoneyDeposited", 2,
                           {"amount": amount, "reference": "forged"}, f"forged-{version}",
                           int(time.time() * 1000)).envelope()
    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": store.config["bootstrap.servers"]})
    producer.produce(store.topic, key=aggregate_id.encode(), value=envelope,
                     partition=store.partition_of(aggregate_id) if partition is None
                     else partition, on_delivery=lambda _e, m: offsets.append(m.offset() or 0))
    assert producer.flush(scaled(10)) == 0 and offsets
    return offsets[0]


def test_records_from_another_producer_are_quarantined_on_every_read_path(
        store: EventStore, accounts: Repository[Account]) -> None:
    for decide in (lambda a: a.open("ann"), lambda a: a.deposit(100), lambda a: a.withdraw(30)):
        accounts.execute("acc-q", decide)
    home = store.partition_of("acc-q")
    elsewhere = (home + 1) % store.partitions
    dup = forge(store, "acc-q", 3, 5_000)  # a second "version 3"
    gap = forge(store, "acc-q", 9, 7_000)  # skips versions 4..8
    astray = forge(store, "acc-q", 4, 9_000, partition=elsewhere)  # the right version, elsewhere
    acc = accounts.load("acc-q")
    assert (acc.version, acc.balance) == (3, 70)
    acc, _ = accounts.execute("acc-q", lambda a: a.deposit(1))  # the store goes on at 4
    assert (acc.version, acc.balance) == (4, 71)
    with EventStore(store.config["bootstrap.servers"], store.topic, bank_events,
                    timeout=scaled(30)) as cold:  # another process, reading from offset 0
        assert vars(Repository(cold, Account).load("acc-q")) == vars(accounts.load("acc-q"))
        with Subscription(cold, f"sub-{store.topic}") as sub:
            seen: list[tuple[str, int]] = []
            deadline = time.monotonic() + scaled(20)
            while len(seen) < 4 and time.monotonic() < deadline:
                seen += [(e.aggregate_id, e.version) for e, _ev in sub.poll(0.5)]
            assert seen == [("acc-q", v) for v in (1, 2, 3, 4)]
            assert sub.poll(0.5) == []
            assert sorted((q.partition, q.offset) for q in sub.quarantined) == sorted(
                [(home, dup), (home, gap), (elsewhere, astray)]) and sub.skipped == 3
    assert fold(store.read("acc-q")).balance == 71
    # ... and says so: each quarantined record with its coordinates.
    assert [(q.partition, q.offset, q.version, q.expected) for q in store.quarantined()] == [
        (home, dup, 3, 4), (home, gap, 9, 4)]
    assert store.quarantined()[0].describe().startswith(
        f"aggregate 'acc-q' at {store.topic}[{home}] offset {dup} is quarantined")


def test_an_append_that_a_foreign_record_overtook_is_refused(store: EventStore,
                                                             any_broker: AnyBroker) -> None:
    store.append("acc-r", [Opened("ann"), Deposited(100)], expected_version=0,
                 aggregate_type="Account")
    forge(store, "acc-r", 3, 50)  # the right next version from another producer: an event
    with pytest.raises(ConcurrencyError, match="expected version 2, but it is at version 3"):
        store.append("acc-r", [Withdrawn(100)], expected_version=2)
    here = Repository(store, Account).load("acc-r")
    with EventStore(any_broker.bootstrap_servers, store.topic, bank_events,
                    timeout=scaled(30)) as cold:
        there = Repository(cold, Account).load("acc-r")
    assert vars(here) == vars(there) and (here.version, here.balance) == (3, 150)
