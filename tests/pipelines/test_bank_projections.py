"""The bank's CQRS projections on Spark: live, then rebuilt from offset 0, must agree."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import SparkSession

from headrace.eventsourcing import EventStore, Repository, StoredEvent
from headrace.eventsourcing.projection import (
    latest_by_key,
    read_event_log,
    read_quarantine,
    write_projection,
)
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


def test_records_from_another_producer_reach_no_read_model(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """A second "version 3" written by a plain producer: the repository's loads skip it, so
    the projections must too, and the quarantine read model names it."""
    bootstrap = broker.bootstrap_servers
    with EventStore(bootstrap, topic_name, bank_events) as store:
        repo = Repository(store, Account)
        for decide in (lambda a: a.open("ann"), lambda a: a.deposit(100),
                       lambda a: a.withdraw(30)):
            repo.execute("ann", decide)
        forged = StoredEvent("ann", "Account", 3, "MoneyDeposited", 2,
                             {"amount": 5_000, "reference": "forged"}, "forged", 0)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topic_name, key=b"ann", value=forged.envelope(),
                         partition=store.partition_of("ann"))
        assert producer.flush(scaled(10)) == 0
        repo.execute("ann", lambda a: a.deposit(1))
        ann = repo.load("ann")
        [quarantined] = store.quarantined()
        events = read_event_log(spark, bootstrap, topic_name)
        rebuild = write_projection(balances(events), bootstrap, f"{topic_name}.balances",
                                   str(tmp_path / "b"), rebuild=True)
        rebuild.awaitTermination(int(scaled(120)))
        assert rebuild.exception() is None
        row = latest_by_key(bootstrap, f"{topic_name}.balances")["ann"]
        assert (row["balance"], row["version"]) == (ann.balance, ann.version) == (71, 4)
        observed = [p.observedMetrics.get(f"quarantined:{topic_name}") for p in rebuild.recentProgress]
        assert sum(m["records"] for m in observed if m) == 1
        # The quarantine read model (here read as a batch) names the record as the store does.
        found = read_quarantine(spark, bootstrap, topic_name, streaming=False).collect()
        assert [(r.key, json.loads(r.value)) for r in found] == [
            (f"{quarantined.partition}:{quarantined.offset}", json.loads(quarantined.to_json()))]
