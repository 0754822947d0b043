"""User profiles kept in PostgreSQL reach the fraud pipeline through CDC (Debezium events
on ``fraud.public.users``), and a profile changed in the database changes the decisions
that follow: seed 003's local table copy, kept fresh by change data capture."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from headrace.cdc.connector import CdcConfig, Connector
from headrace.pipelines.fraud import profiles_db
from headrace.pipelines.fraud.pipeline import PipelineConfig, PipelineTopics, start
from headrace.pipelines.fraud.stream import GeneratedEvent
from headrace.testing import EmbeddedBroker, PostgresServer, scaled
from tests.pipelines.fraud_support import alerts_of
from tests.spark.kafka_helpers import produce, read_all

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _profile(avg: float, std: float, updated_at: int) -> GeneratedEvent:
    value = json.dumps({"user_id": "u1", "home_city": "Oslo", "home_lat": 59.91,
                        "home_lon": 10.75, "avg_amount": avg, "std_amount": std,
                        "card_ids": ["c1"], "updated_at": updated_at}).encode()
    return GeneratedEvent(updated_at, updated_at, b"u1", value, "profile")


def _txn(txn_id: str, amount: float, event_time: int) -> tuple[bytes, bytes]:
    return b"c1", json.dumps({
        "txn_id": txn_id, "card_id": "c1", "user_id": "u1", "merchant_id": "m1",
        "amount": amount, "currency": "EUR", "lat": 59.91, "lon": 10.75, "city": "Oslo",
        "country": "NO", "category": "retail", "event_time": event_time}).encode()


def test_a_profile_changed_in_postgres_changes_the_next_decision(
        spark: SparkSession, tmp_path: Path) -> None:
    with PostgresServer() as pg, EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        table = profiles_db.ProfileTable(pg.dsn)
        stop, ready = threading.Event(), threading.Event()
        connector = Connector(CdcConfig(pg.dsn, (profiles_db.TABLE,), bootstrap,
                                        topic_prefix="fraud", heartbeat_s=1.0))
        capture = threading.Thread(target=connector.run,
                                   args=(stop, lambda _lsn: ready.set()), daemon=True)
        capture.start()
        try:
            assert ready.wait(scaled(60))
            topics = PipelineTopics(profiles=f"fraud.{profiles_db.TABLE}")
            t0 = int(time.time() * 1000)

            def run_pipeline() -> None:
                query = start(spark, PipelineConfig(
                    bootstrap, str(tmp_path / "cp"), topics=topics, available_now=True,
                    profiles_envelope="debezium"))
                query.awaitTermination(scaled(300))
                assert query.exception() is None, query.exception()

            def profile_records(n: int) -> None:
                deadline = time.monotonic() + scaled(30)
                while len(read_all(bootstrap, topics.profiles)) < n:
                    assert time.monotonic() < deadline, "CDC did not deliver the profile"
                    time.sleep(0.2)

            table.write([_profile(20.0, 5.0, t0)])  # spends little: 400 is an anomaly
            profile_records(1)
            produce(bootstrap, topics.transactions, [_txn("t-before", 400.0, t0 + 1000)])
            run_pipeline()
            first = {a["txn_id"]: a["reasons"] for a in alerts_of(bootstrap)}
            assert first == {"t-before": ["amount_anomaly"]}

            table.write([_profile(300.0, 100.0, t0 + 2000)])  # now 400 is ordinary
            profile_records(2)
            produce(bootstrap, topics.transactions, [_txn("t-after", 400.0, t0 + 3000)])
            run_pipeline()
            assert [a["txn_id"] for a in alerts_of(bootstrap)] == ["t-before"]
        finally:
            stop.set()
            capture.join(scaled(10))
            table.close()
