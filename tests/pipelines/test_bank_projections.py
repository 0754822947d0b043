"""The bank's CQRS projections on Spark: live, then rebuilt from offset 0, must agree."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pyspark.sql import SparkSession

from headrace.eventsourcing import EventStore, Repository
from headrace.eventsourcing.projection import latest_by_key, read_event_log, write_projection
from headrace.pipelines.bank.domain import Account, bank_events, transfer
from headrace.pipelines.bank.projections import balances, daily_summary
from headrace.testing import EmbeddedBroker, scaled
from tests.spark.kafka_helpers import forget_last_commit, read_all


def run_commands(repo: Repository[Account], start: int, n: int) -> None:
    for i in range(start, start + n):
        name = f"acc-{i % 5}"
        if repo.load(name).version == 0:
            repo.execute(name, lambda a, n=name: a.open(f"owner {n}"))
        repo.execute(name, lambda a, i=i: a.deposit(100 + i))
        if i % 3 == 0:
            transfer(repo, name, f"acc-{(i + 1) % 5}", 50, f"t{i}")


def test_rebuilt_projection_equals_the_live_one(spark: SparkSession, broker: EmbeddedBroker,
                                                topic_name: str, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap_servers
    with EventStore(bootstrap, topic_name, bank_events) as store:
        repo = Repository(store, Account)
        run_commands(repo, 0, 20)
        events = read_event_log(spark, bootstrap, topic_name)
        live = [write_projection(balances(events), bootstrap, f"{topic_name}.balances",
                                 str(tmp_path / "live-b")),
                write_projection(daily_summary(events), bootstrap, f"{topic_name}.daily",
                                 str(tmp_path / "live-d"))]
        try:
            for q in live:
                q.processAllAvailable()
            run_commands(repo, 20, 15)  # while the projection is live
            for q in live:
                q.processAllAvailable()
        finally:
            for q in live:
                q.stop()
        # A batch Spark replays after a crash (its commit lost) is not written twice.
        before = len(read_all(bootstrap, f"{topic_name}.balances"))
        forget_last_commit(tmp_path / "live-b")
        replay = write_projection(balances(events), bootstrap, f"{topic_name}.balances",
                                  str(tmp_path / "live-b"), rebuild=True)
        replay.awaitTermination(scaled(120))
        assert replay.exception() is None
        assert len(read_all(bootstrap, f"{topic_name}.balances")) == before
        rebuilt = [write_projection(balances(events), bootstrap, f"{topic_name}.balances2",
                                    str(tmp_path / "re-b"), rebuild=True),
                   write_projection(daily_summary(events), bootstrap, f"{topic_name}.daily2",
                                    str(tmp_path / "re-d"), rebuild=True)]
        for q in rebuilt:
            q.awaitTermination(scaled(120))
            assert q.exception() is None
        live_balances = latest_by_key(bootstrap, f"{topic_name}.balances")
        assert live_balances == latest_by_key(bootstrap, f"{topic_name}.balances2")
        assert latest_by_key(bootstrap, f"{topic_name}.daily") == \
            latest_by_key(bootstrap, f"{topic_name}.daily2")
        # ... and both equal the aggregates folded in Python.
        for name in (f"acc-{i}" for i in range(5)):
            acc = repo.load(name)
            row = live_balances[name]
            assert (row["balance"], row["version"], row["owner"]) == (
                acc.balance, acc.version, f"owner {name}")
        day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        summary = latest_by_key(bootstrap, f"{topic_name}.daily")
        all_events = [e for name in live_balances for e in store.read(name)]
        deposited = sum(e.data["amount"] for e in all_events if e.type == "MoneyDeposited")
        assert summary[day]["opened"] == 5 and summary[day]["deposited"] == deposited
