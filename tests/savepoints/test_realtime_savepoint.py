"""The real-time fraud path (Spark Real-Time Mode, the JVM rule operator, the exactly-once
sink) switched twice through savepoints while traffic flows (``realtime_worker``): a
savepoint of the running query, output committed after it, the query stopped and started
from the savepoint with the velocity threshold lowered from 5 to 4 (its replay from the
savepoint's offsets meets that output again); then a savepoint of that query once stopped,
and a start from it with 3 shuffle partitions instead of 2. The alerts read with
read_committed are the expected incidents one for one, none missing, none twice (among
them the velocity alert on a card's fourth transaction, three of them from before the
first switch), the dead letter once, and the sink skipped exactly the output it met again
in each replay."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.savepoints import Savepoint
from headrace.testing import EmbeddedBroker, scaled
from tests.savepoints.realtime_worker import EXPECTED, topics
from tests.spark.kafka_helpers import read_all
from tests.spark.spark_workers.supervisor import SparkWorker

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(scaled(420))
def test_switches_through_savepoints_alert_exactly_once(broker: EmbeddedBroker,
                                                        tmp_path: Path) -> None:
    bootstrap = broker.bootstrap_servers
    prefix = f"sp-rt-{uuid.uuid4().hex[:8]}"
    names = topics(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic(n, num_partitions=1) for n in (
        names.transactions, names.profiles, names.alerts, names.dead_letters)])
    for future in created.values():
        future.result(scaled(30))
    worker = SparkWorker("tests.savepoints.realtime_worker", [bootstrap, str(tmp_path), prefix],
                         tmp_path, "realtime-savepoint")
    try:
        worker.spawn()
        assert worker.wait_for("done", 360), (worker.events(), worker.stderr_tail())
    finally:
        worker.kill()
    events = worker.events()
    assert not any(e.startswith("failed") for e in events), events

    alerts = [json.loads(m.value()) for m in read_all(bootstrap, names.alerts)]
    assert sorted((a["txn_id"], a["card_id"], a["reasons"]) for a in alerts) == EXPECTED
    dead = read_all(bootstrap, names.dead_letters)
    assert [(m.key(), m.value()) for m in dead] == [(b"bad", b"{not json")]

    # what each replay met again: phase 1's alert and dead letter after the running
    # query's savepoint; after the stopped one's, the output of what its batch had not
    # covered (Real-Time Mode's first batch may end where it began)
    offset = {b"bad" if m.key() == b"bad" else json.loads(m.value())["txn_id"]: m.offset()
              for m in read_all(bootstrap, names.transactions) if m.key() is not None}
    running = Savepoint(tmp_path / "sp-running").manifest
    stopped = Savepoint(tmp_path / "sp-stopped").manifest
    assert running.sources[0][names.transactions]["0"] <= offset["b0"]
    assert running.realtime_sink is not None and running.realtime_sink.tasks == 2
    assert stopped.realtime_sink is not None and stopped.realtime_sink.tasks == 2
    (op,) = running.operators
    assert (op.name, op.schema_version, op.params["key"]) == ("realtime.rules", 2, "card_id")
    next_offset = stopped.sources[0][names.transactions]["0"]
    replayed = sum(1 for row in (b"bad", "b1", "c0", "c2") if offset[row] >= next_offset)
    said = {e.split()[0]: e.split()[1:] for e in events}
    assert said["skipped"] == ["2"]
    assert said["done"] == [str(2 + replayed)]
