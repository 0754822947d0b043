"""Event sourcing: commands/s with expected-version appends and aggregate load times,
headrace's event store side by side with the ``eventsourcing`` library (PyPI).

Usage::

    .venv/bin/python bench/event_store.py                      # headrace broker + library
    .venv/bin/python bench/event_store.py --kafka             # also on Apache Kafka
    .venv/bin/python bench/event_store.py --aggregates 2000 --events 2000   # quicker

The same workload for every store, each command being "load the aggregate, decide, append
expecting the loaded version" (the library's ``repository.get`` + ``save``):

- uncontended: ``--aggregates`` accounts opened, then one deposit into each, from 8 threads;
  then deposits from 1 thread (``--single`` of them);
- contended: 4 threads depositing into ONE account for ``--seconds``; a command that loses a
  version race counts as a conflict and is not retried;
- load: one account with ``--events`` events, loaded by full replay and with a snapshot
  every 100 events (the library: ``snapshotting_intervals``), median of 20 loads; for
  headrace from the log itself (a store without cache), and also a new process's first
  load (which reads the partition to build its index) and loads from its cache.

headrace runs against a broker process on this machine (``EmbeddedBroker``; with ``--kafka``
also a real Apache Kafka); the library's stores are in-process: POPO (memory) and SQLite
(a file in a temp dir). Figures go to stdout, one line each.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.application import Application, project_aggregate
from eventsourcing.domain import Aggregate as LibAggregate
from eventsourcing.domain import event
from eventsourcing.persistence import IntegrityError

from headrace.eventsourcing import ConcurrencyError, EventStore, Repository
from headrace.pipelines.bank.domain import Account, Deposited, Opened, bank_events


class Conflict(Exception):
    """A command lost a version race."""


class Store(Protocol):
    name: str

    def open(self, account: str) -> None: ...
    def deposit(self, account: str, amount: int) -> None: ...
    def load(self, account: str) -> int: ...
    def load_snapshotted(self, account: str) -> int: ...
    def seed(self, account: str, events: int) -> None: ...
    def close(self) -> None: ...


class Headrace:
    def __init__(self, name: str, bootstrap: str) -> None:
        self.name = name
        self.store = EventStore(bootstrap, f"bench-{uuid.uuid4().hex[:6]}", bank_events).start()
        self.repo = Repository(self.store, Account)
        # Loads from the log itself: a store whose cache holds nothing.
        self.uncached = EventStore(bootstrap, self.store.topic, bank_events,
                                   cache_events=0).start()
        self.snapshotting = Repository(self.uncached, Account, snapshot_every=100)

    def open(self, account: str) -> None:
        self.repo.execute(account, lambda a: a.open(account))

    def deposit(self, account: str, amount: int) -> None:
        try:
            self.repo.execute(account, lambda a: a.deposit(amount))
        except ConcurrencyError as e:
            raise Conflict from e

    def load(self, account: str) -> int:
        return Repository(self.uncached, Account).load(account).balance

    def extra_loads(self, account: str, events: int) -> None:
        """A new process's first load (it reads the partition once to build its index),
        then loads from the cache that leaves."""
        t0 = time.perf_counter()
        with EventStore(self.store.config["bootstrap.servers"], self.store.topic,
                        bank_events) as fresh:
            repo = Repository(fresh, Account)
            assert repo.load(account).balance == events - 1
            t1 = time.perf_counter()
            times = []
            for _ in range(20):
                t2 = time.perf_counter()
                repo.load(account)
                times.append(time.perf_counter() - t2)
        print(f"{self.name:>22}  load {events} events, new process (index built from the "
              f"partition): {1000 * (t1 - t0):.1f} ms; then from its cache: "
              f"{1000 * statistics.median(times):.2f} ms")

    def load_snapshotted(self, account: str) -> int:
        return self.snapshotting.load(account).balance

    def seed(self, account: str, events: int) -> None:
        self.store.append(account, [Opened(account)], expected_version=0,
                          aggregate_type="Account")
        for v in range(1, events, 100):
            n = min(100, events - v)
            self.store.append(account, [Deposited(1)] * n, expected_version=v,
                              aggregate_type="Account")
        self.snapshotting.snapshot(self.repo.load(account),
                                   self.store.read(account, after_version=events - 1)[0].offset)

    def close(self) -> None:
        self.store.close()
        self.uncached.close()


class LibAccount(LibAggregate):
    @staticmethod
    def create_id(name: str) -> UUID:
        return uuid5(NAMESPACE_URL, f"/accounts/{name}")

    @event("Opened")
    def __init__(self, name: str) -> None:
        self.name = name
        self.balance = 0

    @event("Deposited")
    def deposit(self, amount: int) -> None:
        self.balance += amount


class Library:
    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.app: Application = Application(env=env)
        self.snap_app: Application = type("Snap", (Application,), {
            "snapshotting_intervals": {LibAccount: 100}})(env=env)

    def open(self, account: str) -> None:
        self.app.save(LibAccount(account))

    def deposit(self, account: str, amount: int) -> None:
        acc: LibAccount = self.app.repository.get(LibAccount.create_id(account))
        acc.deposit(amount)
        try:
            self.app.save(acc)
        except IntegrityError as e:
            raise Conflict from e

    def load(self, account: str) -> int:
        repo = self.snap_app.repository  # the library's own projector, without the snapshot
        events = repo.event_store.get(originator_id=LibAccount.create_id(account))
        acc: LibAccount = project_aggregate(None, events)
        return acc.balance

    def load_snapshotted(self, account: str) -> int:
        acc: LibAccount = self.snap_app.repository.get(LibAccount.create_id(account))
        return acc.balance

    def seed(self, account: str, events: int) -> None:
        acc = LibAccount(account)
        self.snap_app.save(acc)
        for i in range(events - 1):
            acc.deposit(1)
            if i % 500 == 499:
                self.snap_app.save(acc)
        self.snap_app.save(acc)  # snapshots are taken on save, every 100 versions

    def close(self) -> None:
        self.app.close()
        self.snap_app.close()


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s"


def parallel(fn: Callable[[str], Any], items: list[str], threads: int) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, items))
    return time.perf_counter() - t0


def contended(store: Store, seconds: float, threads: int = 4) -> tuple[int, int]:
    store.open("hot")
    stop = time.monotonic() + seconds
    ok, lost = [0] * threads, [0] * threads

    def run(i: int) -> None:
        while time.monotonic() < stop:
            try:
                store.deposit("hot", 1)
                ok[i] += 1
            except Conflict:
                lost[i] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(ok), sum(lost)


def bench(store: Store, args: argparse.Namespace) -> None:
    names = [f"acc-{i}" for i in range(args.aggregates)]
    seconds = parallel(store.open, names, 8)
    print(f"{store.name:>22}  open {len(names)} aggregates, 8 threads: {rate(len(names), seconds)}")
    seconds = parallel(lambda n: store.deposit(n, 5), names, 8)
    print(f"{store.name:>22}  deposit into each, 8 threads: {rate(len(names), seconds)}")
    single = names[: args.single]
    seconds = parallel(lambda n: store.deposit(n, 5), single, 1)
    print(f"{store.name:>22}  deposit, 1 thread: {rate(len(single), seconds)} "
          f"({1000 * seconds / len(single):.2f} ms per command)")
    ok, lost = contended(store, args.seconds)
    print(f"{store.name:>22}  one aggregate, 4 threads: {rate(ok, args.seconds)} accepted, "
          f"{rate(lost, args.seconds)} conflicts")
    store.seed("big", args.events)
    for label, load in (("full replay", store.load), ("snapshot", store.load_snapshotted)):
        assert load("big") == args.events - 1
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            load("big")
            times.append(time.perf_counter() - t0)
        print(f"{store.name:>22}  load {args.events} events, {label}: "
              f"{1000 * statistics.median(times):.2f} ms")
    if isinstance(store, Headrace):
        store.extra_loads("big", args.events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aggregates", type=int, default=10_000)
    parser.add_argument("--single", type=int, default=2_000)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--kafka", action="store_true", help="also against Apache Kafka")
    args = parser.parse_args()
    from headrace.testing import ApacheKafka, EmbeddedBroker

    with tempfile.TemporaryDirectory() as tmp:
        stores: list[Callable[[], Store]] = [
            lambda: Library("eventsourcing POPO", {}),
            lambda: Library("eventsourcing SQLite", {
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": f"{tmp}/events.db"}),
        ]
        with EmbeddedBroker(data_dir=f"{tmp}/broker") as broker:
            stores.insert(0, lambda: Headrace("headrace (own broker)",
                                              broker.bootstrap_servers))
            for make in stores:
                s = make()
                try:
                    bench(s, args)
                finally:
                    s.close()
        if args.kafka:
            with ApacheKafka() as kafka:
                s = Headrace("headrace (Apache Kafka)", kafka.bootstrap_servers)
                try:
                    bench(s, args)
                finally:
                    s.close()


if __name__ == "__main__":
    main()
