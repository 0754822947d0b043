"""``headrace demo bank``: seed 003's bank account, event-sourced on the log.

Opens accounts, races withdrawals from several threads (expected-version appends: the
losers of each race re-decide, nobody overdraws), runs a transfer twice under one id (it
applies once), answers a balance-as-of question by replaying to a point in time, and
rebuilds the Spark projections (balances, per-day summary) from offset 0 while a live one
runs, checking that all of them agree with the aggregates folded in Python.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

from headrace.eventsourcing import ConcurrencyError, EventStore, Repository
from headrace.pipelines.bank.domain import Account, CommandRejected, bank_events, transfer

Say = Callable[[str], object]
CENTS = 100


@dataclass
class BankReport:
    """What the demo checked; ``problems`` is empty when everything held."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        self.lines.append(f"{'ok ' if ok else 'FAILED'} {what}")
        if not ok:
            self.problems.append(what)

    def render(self) -> str:
        return "\n".join(["bank demo (event sourcing + CQRS on the log)", *self.lines])


def euros(cents: int) -> str:
    return f"{cents / CENTS:,.2f} EUR"


@contextlib.contextmanager
def _broker(bootstrap_servers: str | None, say: Say) -> Iterator[str]:
    if bootstrap_servers is not None:
        yield bootstrap_servers
        return
    from headrace.testing import EmbeddedBroker

    with tempfile.TemporaryDirectory(prefix="headrace-bank-") as data, \
            EmbeddedBroker(data_dir=data) as broker:
        say(f"embedded broker at {broker.bootstrap_servers}")
        yield broker.bootstrap_servers


def run_bank_demo(bootstrap_servers: str | None, say: Say, spark_projection: bool = True
                  ) -> BankReport:
    """Run the demo (blocks ~30 s, most of it Spark); progress lines go to ``say``."""
    report = BankReport()
    topic = f"bank-{uuid.uuid4().hex[:6]}.events"
    with _broker(bootstrap_servers, say) as bootstrap, \
            EventStore(bootstrap, topic, bank_events) as store:
        accounts = Repository(store, Account, snapshot_every=20)
        say(f"event store on topic {topic} ({store.partitions} partitions)")
        for name, owner, amount in (("alice", "Alice", 100), ("bob", "Bob", 250),
                                    ("carol", "Carol", 40)):
            accounts.execute(name, partial(Account.open, owner=owner),
                             command_id=f"open-{name}")
            accounts.execute(name, partial(Account.deposit, amount=amount * CENTS,
                                           reference="salary"), command_id=f"salary-{name}")
        _race(accounts, report, say)
        before_transfer = int(time.time() * 1000)
        time.sleep(0.01)
        done = transfer(accounts, "bob", "carol", 25 * CENTS, "t-1")
        again = transfer(accounts, "bob", "carol", 25 * CENTS, "t-1")  # a client retry
        bob, carol = accounts.load("bob"), accounts.load("carol")
        say(f"transfer t-1 bob -> carol 25.00 EUR, sent twice: bob {euros(bob.balance)}, "
            f"carol {euros(carol.balance)}")
        report.check(done and again and bob.balance == 225 * CENTS
                     and carol.balance == 65 * CENTS,
                     "a transfer sent twice under one id moved the money once")
        then = accounts.load("bob", at=before_transfer)
        say(f"time travel: bob's balance just before the transfer was {euros(then.balance)} "
            f"(version {then.version}); now {euros(bob.balance)} (version {bob.version})")
        report.check(then.balance == 250 * CENTS and accounts.load(
            "bob", version=2).balance == 250 * CENTS, "balance as of a time and a version")
        _snapshots(accounts, report, say)
        if spark_projection:
            _projections(bootstrap, store, accounts, report, say)
    return report


def _race(accounts: Repository[Account], report: BankReport, say: Say) -> None:
    """Eight tellers read alice's 100.00 EUR at the same moment and each withdraw 30.00 EUR,
    appending at the version they read: one wins each version, the others re-read and decide
    again, until the balance refuses them."""
    start = threading.Barrier(8)
    outcome: list[str] = []
    conflicts: list[int] = []
    lock = threading.Lock()

    def teller(i: int) -> None:
        retried = 0
        seen = accounts.load("alice")
        start.wait()
        while True:
            try:
                accounts.store.append("alice", seen.withdraw(30 * CENTS, f"teller {i}"),
                                      expected_version=seen.version, aggregate_type="Account",
                                      command_id=f"teller-{i}")
                result = "paid"
                break
            except ConcurrencyError:
                retried += 1  # someone appended first: read again, decide again
                seen = accounts.load("alice")
            except CommandRejected:
                result = "refused"
                break
        with lock:
            outcome.append(result)
            conflicts.append(retried)

    threads = [threading.Thread(target=teller, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alice = accounts.load("alice")
    paid = outcome.count("paid")
    say(f"8 tellers withdraw 30.00 EUR from alice's 100.00 EUR at once: {paid} paid, "
        f"{outcome.count('refused')} refused (overdraft); {sum(conflicts)} appends lost a "
        f"version race and were decided again; balance {euros(alice.balance)}")
    report.check(paid == 3 and alice.balance == 10 * CENTS,
                 "concurrent withdrawals: exactly 3 of 8 paid, never overdrawn")


def _snapshots(accounts: Repository[Account], report: BankReport, say: Say) -> None:
    for i in range(60):
        accounts.execute("carol", partial(Account.deposit, amount=CENTS,
                                          reference=f"coffee refund {i}"))
    full = accounts.load("carol", use_snapshot=False)
    snap = accounts.store.snapshot("carol")
    fast = accounts.load("carol")
    say(f"carol has {full.version} events; her latest snapshot is at version "
        f"{snap.version if snap else '-'}, so a load reads {full.version - (snap.version if snap else 0)} events")
    report.check(snap is not None and vars(full) == vars(fast),
                 "snapshot + tail equals the full replay")


def _projections(bootstrap: str, store: EventStore, accounts: Repository[Account],
                 report: BankReport, say: Say) -> None:
    from headrace.eventsourcing.projection import (
        latest_by_key,
        read_event_log,
        write_projection,
    )
    from headrace.pipelines.bank.projections import balances, daily_summary
    from headrace.spark.session import local_session

    logs = tempfile.mkdtemp(prefix="headrace-bank-spark-")
    say(f"starting Spark for the projections; its log: {logs}/spark.log ...")
    spark = local_session("headrace-bank-demo", jvm_log=f"{logs}/spark.log")
    events = read_event_log(spark, bootstrap, store.topic)
    out = {"live": f"{store.topic}.balances", "rebuilt": f"{store.topic}.balances-rebuilt"}
    with tempfile.TemporaryDirectory(prefix="headrace-bank-cp-") as cp:
        live = write_projection(balances(events), bootstrap, out["live"], f"{cp}/live",
                                query_name="bank-balances")
        live.processAllAvailable()
        accounts.execute("alice", lambda a: a.deposit(5 * CENTS, "late deposit"))
        live.processAllAvailable()
        live.stop()
        for q in (write_projection(balances(events), bootstrap, out["rebuilt"], f"{cp}/re",
                                   rebuild=True),
                  write_projection(daily_summary(events), bootstrap, f"{store.topic}.daily",
                                   f"{cp}/daily", rebuild=True)):
            q.awaitTermination()
    live_rows = latest_by_key(bootstrap, out["live"])
    rebuilt_rows = latest_by_key(bootstrap, out["rebuilt"])
    folded = {n: accounts.load(n).balance for n in ("alice", "bob", "carol")}
    projected = {n: int(row["balance"]) for n, row in rebuilt_rows.items()}
    say("balances (projection rebuilt from offset 0): " + ", ".join(
        f"{n} {euros(b)}" for n, b in sorted(projected.items())))
    for day, row in sorted(latest_by_key(bootstrap, f"{store.topic}.daily").items()):
        say(f"per-day summary {day}: {row['opened']} opened, {row['deposits']} deposits "
            f"({euros(row['deposited'])}), {row['withdrawals']} withdrawals "
            f"({euros(row['withdrawn'])})")
    report.check(live_rows == rebuilt_rows and projected == folded,
                 "projection rebuilt from offset 0 equals the live one and the aggregates")
