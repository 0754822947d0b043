"""The real-time fraud path (Spark Real-Time Mode, the JVM rule operator) stopped with a
savepoint and started from it with a changed rule set: the velocity rule's threshold
lowered from 5 to 4 transactions, the fourth transaction of a card (the first after the
switch) raises it, its count including the three seen before the stop. Without the
savepoint's state the count would be 1; with the old threshold, 4 raises nothing. The
alert topic then holds exactly that one alert."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.savepoints import Savepoint
from headrace.testing import EmbeddedBroker, scaled
from tests.savepoints.realtime_worker import topics
from tests.spark.kafka_helpers import read_all
from tests.spark.spark_workers.supervisor import SparkWorker

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BASE = 1_700_000_000_000


def _txn(txn_id: str, card: str, t: int) -> bytes:
    return json.dumps({"txn_id": txn_id, "card_id": card, "user_id": "u-" + card,
                       "merchant_id": "m1", "amount": 25.0, "lat": 52.5, "lon": 13.4,
                       "city": "Berlin", "event_time": t}).encode()


def _produce(bootstrap: str, topic: str, txns: list[tuple[str, str, int]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for txn_id, card, t in txns:
        producer.produce(topic, _txn(txn_id, card, t), key=card.encode())
    assert producer.flush(scaled(30)) == 0


@pytest.mark.timeout(scaled(300))
def test_stopped_with_savepoint_restarted_with_changed_rules_alerts_on_history(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap_servers
    prefix = f"sp-rt-{uuid.uuid4().hex[:8]}"
    names = topics(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic(n, num_partitions=1) for n in (
        names.transactions, names.profiles, names.alerts, names.dead_letters)])
    for future in created.values():
        future.result(scaled(30))
    before = [("t0", "c1", BASE), ("t1", "c1", BASE + 1_000), ("t2", "c1", BASE + 2_000),
              ("u0", "c2", BASE + 500)]
    _produce(bootstrap, names.transactions, before)
    worker = SparkWorker("tests.savepoints.realtime_worker",
                         [bootstrap, str(tmp_path), prefix, str(len(before))], tmp_path,
                         "realtime-savepoint")
    try:
        worker.spawn()
        assert worker.wait_for("savepoint", 240), worker.stderr_tail()
        assert "savepoint 2" in worker.events()  # cards c1 and c2
        op, = Savepoint(tmp_path / "savepoint").manifest.operators
        assert (op.name, op.schema_version, op.params["key"]) == \
            ("realtime.rules", 2, "card_id")
        assert worker.wait_for("started", 120), worker.stderr_tail()
        _produce(bootstrap, names.transactions, [("t3", "c1", BASE + 3_000)])
        assert worker.wait_for(f"committed {len(before) + 1}", 120), worker.stderr_tail()
    finally:
        worker.kill()
    alerts = [json.loads(m.value()) for m in read_all(bootstrap, names.alerts)]
    assert [(a["txn_id"], a["card_id"], a["reasons"]) for a in alerts] == \
        [("t3", "c1", ["velocity"])]
    assert not any(e.startswith("failed") for e in worker.events()), worker.events()
