"""The PostgreSQL connector against a real PostgreSQL and a real broker, through its CLI."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from headrace.testing import EmbeddedBroker, PostgresServer, scaled
from tests.cdc.support import ConnectorProcess, execute, query, read_topic, wait_events, wait_for


def test_changes_arrive_in_commit_order_with_debezium_envelopes(
        postgres: PostgresServer, broker: EmbeddedBroker, name: str) -> None:
    dsn = postgres.dsn
    execute(dsn, f"CREATE SCHEMA {name}",
            f"CREATE TABLE {name}.users (id int PRIMARY KEY, email text, "
            "balance numeric(10,2), seen timestamptz, tags text[], doc jsonb, raw bytea)",
            f"CREATE TABLE {name}.accounts (id bigint PRIMARY KEY, owner int)",
            f"INSERT INTO {name}.users VALUES (1, 'ada@x', 10.50, "
            "'2024-01-02 03:04:05.25+00', '{a,b}', '{\"k\": 1}', '\\x0102')")
    with ConnectorProcess(dsn, f"{name}.users,{name}.accounts", broker.bootstrap_servers, name):
        execute(dsn, f"INSERT INTO {name}.users (id, email) VALUES (2, 'bob@x')",
                f"INSERT INTO {name}.accounts VALUES (20, 2)",
                f"UPDATE {name}.users SET email = 'bob@y' WHERE id = 2")
        execute(dsn, f"DELETE FROM {name}.accounts WHERE id = 20",
                f"DELETE FROM {name}.users WHERE id = 2")
        users = wait_events(broker, f"{name}.{name}.users", 5)
        accounts = wait_events(broker, f"{name}.{name}.accounts", 3)
    ops = [(k["id"], v and v["op"]) for k, v in users]
    assert ops == [(1, "r"), (2, "c"), (2, "u"), (2, "d"), (2, None)]  # tombstone last
    snap = users[0][1]
    assert snap is not None and snap["before"] is None and snap["source"]["snapshot"] == "last"
    assert snap["after"] == {"id": 1, "email": "ada@x", "balance": "BBo=",
                             "seen": "2024-01-02T03:04:05.250000Z", "tags": ["a", "b"],
                             "doc": '{"k": 1}', "raw": "AQI="}
    created, updated, deleted = (users[i][1] for i in (1, 2, 3))
    assert created and updated and deleted
    assert updated["before"] is None and updated["after"]["email"] == "bob@y"
    assert deleted["before"]["id"] == 2 and deleted["after"] is None
    for event in (created, updated, deleted):
        assert event["source"]["connector"] == "postgresql"
        assert (event["source"]["schema"], event["source"]["table"]) == (name, "users")
        assert event["source"]["snapshot"] == "false"
    # one database transaction: one txId across both tables, LSNs in commit order
    assert created["source"]["txId"] == updated["source"]["txId"] == \
        accounts[0][1]["source"]["txId"]
    assert deleted["source"]["txId"] == accounts[1][1]["source"]["txId"] != \
        created["source"]["txId"]
    assert created["source"]["lsn"] < accounts[0][1]["source"]["lsn"] < \
        updated["source"]["lsn"] < deleted["source"]["lsn"]
    assert [k for k, _ in accounts] == [{"id": 20}] * 3


def _versions(events: list[Any]) -> dict[int, list[int]]:
    seen: dict[int, list[int]] = {}
    for key, value in events:
        if value is not None and value["after"] is not None:
            seen.setdefault(key["id"], []).append(value["after"]["v"])
    return seen


def _check_every_version_once(dsn: str, table: str, events: list[Any]) -> None:
    final = dict(query(dsn, f"SELECT id, v FROM {table}"))
    seen = _versions(events)
    assert set(seen) == set(final)
    for key, versions in seen.items():
        first = versions[0]
        assert versions == list(range(first, final[key] + 1)), (key, versions)


class Writer(threading.Thread):
    """Bumps ``v`` of random rows (and inserts new ones), one transaction at a time."""

    def __init__(self, dsn: str, table: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.table, self.rng = dsn, table, random.Random(seed)
        self.stop = threading.Event()
        self.transactions = 0

    def run(self) -> None:
        conn = psycopg2.connect(self.dsn)
        next_id = 1000
        with conn.cursor() as cur:
            while not self.stop.is_set():
                if self.rng.random() < 0.2:
                    cur.execute(f"INSERT INTO {self.table} VALUES (%s, 1)", (next_id,))
                    next_id += 1
                for _ in range(self.rng.randint(1, 3)):
                    cur.execute(f"UPDATE {self.table} SET v = v + 1 WHERE id = %s",
                                (self.rng.randrange(50),))
                conn.commit()
                self.transactions += 1
                time.sleep(0.002)
        conn.close()


def test_the_snapshot_and_the_stream_meet_without_gap_or_double(
        postgres: PostgresServer, broker: EmbeddedBroker, name: str) -> None:
    table = f"{name}.items"
    execute(postgres.dsn, f"CREATE SCHEMA {name}",
            f"CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)",
            f"INSERT INTO {table} SELECT g, 1 FROM generate_series(0, 49) g")
    writer = Writer(postgres.dsn, table, 1)
    writer.start()
    try:
        time.sleep(0.3)
        with ConnectorProcess(postgres.dsn, table, broker.bootstrap_servers, name):
            # Writes go on while the connector streams: a count, not a time (a slow
            # machine writes fewer per second).
            streaming_from = writer.transactions
            wait_for(lambda: writer.transactions >= streaming_from + 50, 60,
                      "50 transactions while the connector streams")
            writer.stop.set()
            writer.join()
            final = dict(query(postgres.dsn, f"SELECT id, v FROM {table}"))

            def caught_up() -> list[Any] | None:
                events = read_topic(broker.bootstrap_servers, f"{name}.{table}")
                last = {k: v[-1] for k, v in _versions(events).items()}
                return events if last == final else None

            events = wait_for(caught_up, 60, "the connector to catch up")
    finally:
        writer.stop.set()
    _check_every_version_once(postgres.dsn, table, events)


@pytest.mark.slow
def test_kill_9_of_the_connector_loses_and_doubles_nothing(
        postgres: PostgresServer, broker: EmbeddedBroker, name: str) -> None:
    table = f"{name}.items"
    execute(postgres.dsn, f"CREATE SCHEMA {name}",
            f"CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)",
            f"INSERT INTO {table} SELECT g, 1 FROM generate_series(0, 49) g")
    connector = ConnectorProcess(postgres.dsn, table, broker.bootstrap_servers, name).start()
    writer = Writer(postgres.dsn, table, 2)
    writer.start()
    rng = random.Random(5)
    try:
        for _ in range(20):
            time.sleep(rng.uniform(0.05, 0.6))
            connector.kill()
            connector.start()
    finally:
        writer.stop.set()
        writer.join()
    final = dict(query(postgres.dsn, f"SELECT id, v FROM {table}"))

    def caught_up() -> list[Any] | None:
        events = read_topic(broker.bootstrap_servers, f"{name}.{table}")
        last = {k: v[-1] for k, v in _versions(events).items()}
        return events if last == final else None

    events = wait_for(caught_up, 120, "the connector to catch up")
    connector.stop()
    _check_every_version_once(postgres.dsn, table, events)


def test_heartbeats_keep_wal_retention_bounded_while_captured_tables_idle(
        postgres: PostgresServer, broker: EmbeddedBroker, name: str) -> None:
    execute(postgres.dsn, f"CREATE SCHEMA {name}",
            f"CREATE TABLE {name}.quiet (id int PRIMARY KEY)",
            f"CREATE TABLE {name}.busy (id serial PRIMARY KEY, pad text)")
    with ConnectorProcess(postgres.dsn, f"{name}.quiet", broker.bootstrap_servers, name):
        for _ in range(20):  # ~20 MB of WAL on a table nobody captures
            execute(postgres.dsn, f"INSERT INTO {name}.busy (pad) SELECT repeat('x', 1000) "
                                  "FROM generate_series(1, 1000)")

        def retained() -> bool:
            rows = query(postgres.dsn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), "
                                       f"confirmed_flush_lsn) FROM pg_replication_slots "
                                       f"WHERE slot_name = '{name}'")
            return int(rows[0][0]) < 1_000_000  # 0 too: the slot confirmed the WAL's end

        wait_for(retained, 20, "the slot to follow the WAL")


def test_toast_and_replica_identity_full(postgres: PostgresServer, broker: EmbeddedBroker,
                                         name: str) -> None:
    table = f"{name}.docs"
    big = "".join(random.Random(3).choice("abcdefghij0123456789") for _ in range(20_000))
    execute(postgres.dsn, f"CREATE SCHEMA {name}",
            f"CREATE TABLE {table} (id int PRIMARY KEY, title text, body text)",
            f"ALTER TABLE {table} ALTER COLUMN body SET STORAGE EXTERNAL",
            f"INSERT INTO {table} VALUES (1, 'a', '{big}')")
    with ConnectorProcess(postgres.dsn, table, broker.bootstrap_servers, name, "--snapshot",
                          "never"):
        execute(postgres.dsn, f"UPDATE {table} SET title = 'b' WHERE id = 1")
        execute(postgres.dsn, f"ALTER TABLE {table} REPLICA IDENTITY FULL")
        execute(postgres.dsn, f"UPDATE {table} SET title = 'c' WHERE id = 1")
        execute(postgres.dsn, f"ALTER TABLE {table} ADD COLUMN rating int",
                f"INSERT INTO {table} VALUES (2, 'new', 'short', 5)")
        events = wait_events(broker, f"{name}.{table}", 3)
    first, second, third = (v for _, v in events)
    assert first["after"]["body"] == "__debezium_unavailable_value"
    assert first["before"] is None
    assert second["before"]["title"] == "b" and second["before"]["body"] == big
    assert second["after"]["body"] == big
    assert third["op"] == "c" and third["after"]["rating"] == 5


@pytest.mark.parametrize("problem", ["missing table", "no primary key", "no replication"])
def test_bad_configuration_is_a_clear_error(postgres: PostgresServer, broker: EmbeddedBroker,
                                            name: str, problem: str) -> None:
    execute(postgres.dsn, f"CREATE SCHEMA {name}",
            f"CREATE TABLE {name}.nokey (a int)",
            f"CREATE ROLE {name} LOGIN", f"GRANT ALL ON SCHEMA {name} TO {name}")
    dsn, table, expected = postgres.dsn, f"{name}.nokey", "no primary key"
    if problem == "missing table":
        table, expected = f"{name}.ghost", "does not exist"
    elif problem == "no replication":
        dsn, expected = postgres.dsn.replace("user=postgres", f"user={name}"), "REPLICATION"
    connector = ConnectorProcess(dsn, table, broker.bootstrap_servers, name)
    with pytest.raises(Exception, match="exited during start-up") as e:
        connector.start()
    assert expected in str(e.value)
    assert "Traceback" not in str(e.value)


def test_wal_level_not_logical_is_refused(broker: EmbeddedBroker, name: str) -> None:
    with PostgresServer({"wal_level": "replica"}) as pg:
        execute(pg.dsn, "CREATE TABLE t (id int PRIMARY KEY)")
        with pytest.raises(Exception, match="wal_level") as e:
            ConnectorProcess(pg.dsn, "public.t", broker.bootstrap_servers, name).start()
        assert "Traceback" not in str(e.value)


def test_status_shows_the_slot_and_the_log(postgres: PostgresServer, broker: EmbeddedBroker,
                                           name: str) -> None:
    import subprocess
    import sys

    execute(postgres.dsn, f"CREATE SCHEMA {name}", f"CREATE TABLE {name}.t (id int PRIMARY KEY)",
            f"INSERT INTO {name}.t VALUES (1)")
    with ConnectorProcess(postgres.dsn, f"{name}.t", broker.bootstrap_servers, name):
        execute(postgres.dsn, f"INSERT INTO {name}.t VALUES (2)")
        wait_events(broker, f"{name}.{name}.t", 2)
        done = subprocess.run([sys.executable, "-m", "headrace", "cdc", "status", "--dsn",
                               postgres.dsn, "--slot", name, "--bootstrap-servers",
                               broker.bootstrap_servers], capture_output=True, text=True,
                              timeout=scaled(60), check=False)
    assert done.returncode == 0, done.stderr
    assert f"slot {name}: confirmed " in done.stdout and "WAL retained" in done.stdout
    assert "snapshot done" in done.stdout and "since the last write" in done.stdout
    assert f"{name}.{name}.t: 2 change events" in done.stdout
    gone = subprocess.run([sys.executable, "-m", "headrace", "cdc", "status", "--dsn",
                           postgres.dsn, "--slot", "nosuchslot", "--bootstrap-servers",
                           broker.bootstrap_servers], capture_output=True, text=True,
                          timeout=scaled(60), check=False)
    assert gone.returncode == 1 and "none" in gone.stdout


def test_a_lost_slot_is_a_loud_error_and_always_resnapshots(
        postgres: PostgresServer, broker: EmbeddedBroker, name: str) -> None:
    execute(postgres.dsn, f"CREATE SCHEMA {name}", f"CREATE TABLE {name}.t (id int PRIMARY KEY)",
            f"INSERT INTO {name}.t VALUES (1)")
    with ConnectorProcess(postgres.dsn, f"{name}.t", broker.bootstrap_servers, name):
        wait_events(broker, f"{name}.{name}.t", 1)
    execute(postgres.dsn, f"SELECT pg_drop_replication_slot('{name}')",
            f"INSERT INTO {name}.t VALUES (2)")  # a change nobody captured
    with pytest.raises(Exception, match="exited during start-up") as e:
        ConnectorProcess(postgres.dsn, f"{name}.t", broker.bootstrap_servers, name).start()
    assert "--snapshot always" in str(e.value) and "Traceback" not in str(e.value)
    with ConnectorProcess(postgres.dsn, f"{name}.t", broker.bootstrap_servers, name,
                          "--snapshot", "always"):
        events = wait_events(broker, f"{name}.{name}.t", 3)
    assert [(k["id"], v["op"]) for k, v in events] == [(1, "r"), (1, "r"), (2, "r")]


@pytest.mark.slow
def test_kill_9_of_the_broker_loses_and_doubles_nothing(postgres: PostgresServer,
                                                        name: str) -> None:
    """The broker dies under the connector five times; the connector either rides it out
    (the client retries) or fails its write and is restarted, as a supervisor would."""
    table = f"{name}.items"
    execute(postgres.dsn, f"CREATE SCHEMA {name}",
            f"CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)",
            f"INSERT INTO {table} SELECT g, 1 FROM generate_series(0, 49) g")
    with EmbeddedBroker() as broker:
        connector = ConnectorProcess(postgres.dsn, table, broker.bootstrap_servers, name).start()
        writer = Writer(postgres.dsn, table, 3)
        writer.start()
        restarts = 0
        try:
            for _ in range(5):
                time.sleep(1.0)
                broker.kill()
                time.sleep(0.5)
                broker.start()
                time.sleep(1.0)
                if connector.process is not None and connector.process.poll() is not None:
                    connector.start()
                    restarts += 1
        finally:
            writer.stop.set()
            writer.join()
        final = dict(query(postgres.dsn, f"SELECT id, v FROM {table}"))

        def caught_up() -> list[Any] | None:
            if connector.process is not None and connector.process.poll() is not None:
                connector.start()
            events = read_topic(broker.bootstrap_servers, f"{name}.{table}")
            last = {k: v[-1] for k, v in _versions(events).items()}
            return events if last == final else None

        events = wait_for(caught_up, 120, "the connector to catch up")
        connector.stop()
    _check_every_version_once(postgres.dsn, table, events)


def test_avro_through_the_schema_registry(postgres: PostgresServer, broker: EmbeddedBroker,
                                          registry: Any, name: str) -> None:
    """--schema-registry: keys and values in Confluent's Avro wire format, readable by
    Confluent's AvroDeserializer; an added column registers a compatible new version."""
    import base64

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    table = f"{name}.users"
    execute(postgres.dsn, f"CREATE SCHEMA {name}",
            f"CREATE TABLE {table} (id int PRIMARY KEY, email text, balance numeric(10,2), "
            "raw bytea, tags int[], score float8)",
            f"INSERT INTO {table} VALUES (1, 'ada@x', 10.50, '\\x0102', '{{1,2}}', 0.5)")
    topic = f"{name}.{table}"
    with ConnectorProcess(postgres.dsn, table, broker.bootstrap_servers, name,
                          "--schema-registry", registry.url):
        execute(postgres.dsn, f"UPDATE {table} SET email = 'ada@y', score = 'NaN' WHERE id = 1")
        execute(postgres.dsn, f"ALTER TABLE {table} ADD COLUMN city text",
                f"INSERT INTO {table} (id, city) VALUES (2, 'Oslo')",
                f"DELETE FROM {table} WHERE id = 2")
        wait_for(lambda: len(_raw(broker.bootstrap_servers, topic)) >= 5, what="5 records")
    sr = SchemaRegistryClient({"url": registry.url})
    decode = AvroDeserializer(sr)
    key_ctx = SerializationContext(topic, MessageField.KEY)
    value_ctx = SerializationContext(topic, MessageField.VALUE)
    got = [(decode(k, key_ctx), v and decode(v, value_ctx))
           for k, v in _raw(broker.bootstrap_servers, topic)]
    assert [(k["id"], v and v["op"]) for k, v in got] == [
        (1, "r"), (1, "u"), (2, "c"), (2, "d"), (2, None)]
    first = got[0][1]
    assert first["after"] == {"id": 1, "email": "ada@x", "balance": base64.b64decode("BBo="),
                              "raw": b"\x01\x02", "tags": [1, 2], "score": 0.5}
    assert got[1][1]["after"]["email"] == "ada@y"
    assert got[2][1]["after"]["city"] == "Oslo"
    assert sr.get_versions(f"{topic}-value") == [1, 2]


def _raw(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    import uuid

    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes, bytes | None]] = []
    try:
        while True:
            msg = consumer.poll(scaled(10))
            if msg is None:
                return out
            err = msg.error()
            if err is not None:
                if err.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                    return out
                raise AssertionError(err)
            out.append((msg.key() or b"", msg.value()))
    finally:
        consumer.close()


def test_the_connector_over_sasl(postgres: PostgresServer, name: str, tmp_path: Path) -> None:
    """The connector takes the client settings every tool takes (here from
    ``HEADRACE_COMMAND_CONFIG``): SCRAM over a SASL listener, its transactions included."""
    with EmbeddedBroker(extra_args=["--listener", "PLAINTEXT://127.0.0.1:0",
                                    "--listener", "SASL_PLAINTEXT://127.0.0.1:0"]) as b:
        added = subprocess.run([sys.executable, "-m", "headrace", "users", "add", "cdc", "-b",
                                b.bootstrap_servers], capture_output=True, text=True,
                               timeout=scaled(60),
                               env={**os.environ, "HEADRACE_USER_PASSWORD": "pw"})
        assert added.returncode == 0, added.stderr
        config = tmp_path / "client.properties"
        config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                          "sasl.username=cdc\nsasl.password=pw\n")
        dsn = postgres.dsn
        execute(dsn, f"CREATE SCHEMA {name}",
                f"CREATE TABLE {name}.items (id int PRIMARY KEY, label text)",
                f"INSERT INTO {name}.items VALUES (1, 'snap')")
        with ConnectorProcess(dsn, f"{name}.items", b.listeners["SASL_PLAINTEXT"], name,
                              env={"HEADRACE_COMMAND_CONFIG": str(config)}):
            execute(dsn, f"INSERT INTO {name}.items VALUES (2, 'streamed')")
            events = wait_events(b, f"{name}.{name}.items", 2)
    assert [(k["id"], v and v["op"]) for k, v in events] == [(1, "r"), (2, "c")]
