"""The MySQL/MariaDB connector (``headrace cdc mysql``) against a real MariaDB and a real
broker, through its CLI: the envelope and type mapping of snapshot and stream, DDL
followed, key changes, and ``kill -9`` losing and doubling nothing."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from typing import Any

import pymysql
import pytest

from headrace.testing import EmbeddedBroker, MariaDBServer, scaled
from tests.cdc.mysql_support import MySqlConnectorProcess, execute, mariadb, query
from tests.cdc.support import read_topic, wait_events, wait_for

__all__ = ["mariadb"]  # the module's MariaDB fixture

TYPES = ("id int PRIMARY KEY, name varchar(20), amount decimal(10,2), neg decimal(5,3), "
         "f float, d double, at timestamp(3) NULL, at0 timestamp NULL, dt datetime(6), "
         "dt0 datetime, dd date, tm time(2), y year, b bit(1), b12 bit(12), "
         "e enum('x','y'), st set('a','b','c'), raw varbinary(10), bin binary(3), "
         "txt text, blb blob, j json, u bigint unsigned, ti tinyint, ui int unsigned, "
         "si smallint, mi mediumint unsigned")
ROW = ("1, 'ada', 10.50, -1.5, 0.1, 0.1, '2024-01-02 03:04:05.250', '2024-01-02 03:04:05', "
       "'2024-01-02 03:04:05.123456', '2024-01-02 03:04:05', '2024-01-02', '-01:02:03.5', "
       "2024, 1, 5, 'y', 'c,a', x'0102', x'01', 'héllo', x'ff00', '{\"k\": 1}', "
       "18446744073709551615, -128, 4294967295, -32768, 16777215")
# Debezium's JSON for ROW (its MySQL connector's default settings)
EXPECTED = {"id": 1, "name": "ada", "amount": "BBo=", "neg": "+iQ=", "f": 0.1, "d": 0.1,
            "at": "2024-01-02T03:04:05.25Z", "at0": "2024-01-02T03:04:05Z",
            "dt": 1704164645123456, "dt0": 1704164645000, "dd": 19724, "tm": -3723500000,
            "y": 2024, "b": True, "b12": "BQA=", "e": "y", "st": "a,c", "raw": "AQI=",
            "bin": "AQAA", "txt": "héllo", "blb": "/wA=", "j": '{"k": 1}', "u": -1,
            "ti": -128, "ui": 4294967295, "si": -32768, "mi": 16777215}


def test_snapshot_and_stream_in_debeziums_mysql_envelope(
        mariadb: MariaDBServer, broker: EmbeddedBroker, name: str) -> None:
    execute(mariadb, f"CREATE DATABASE {name}", f"CREATE TABLE {name}.t ({TYPES})",
            f"CREATE TABLE {name}.other (id int PRIMARY KEY, v int)",
            f"INSERT INTO {name}.t VALUES ({ROW})",
            f"INSERT INTO {name}.other VALUES (1, 1), (2, 2), (3, 3)")
    with MySqlConnectorProcess(mariadb.dsn, f"{name}.t,{name}.other",
                               broker.bootstrap_servers, name):
        execute(mariadb, f"INSERT INTO {name}.t (id, name) VALUES (2, 'bob')",
                f"UPDATE {name}.t SET name = 'bob2', amount = 0 WHERE id = 2",
                f"UPDATE {name}.other SET v = 20 WHERE id = 2")
        execute(mariadb, f"DELETE FROM {name}.t WHERE id = 2")
        execute(mariadb, f"UPDATE {name}.t SET id = 5 WHERE id = 1")  # the key changes
        events = wait_events(broker, f"{name}.{name}.t", 8)
        other = wait_events(broker, f"{name}.{name}.other", 4)
    ops = [(k["id"], v and v["op"]) for k, v in events]
    assert ops == [(1, "r"), (2, "c"), (2, "u"), (2, "d"), (2, None), (1, "d"), (1, None),
                   (5, "c")]
    snap, created, updated, deleted = (events[i][1] for i in (0, 1, 2, 3))
    assert snap["after"] == EXPECTED and snap["before"] is None
    # the snapshot's markers run over both tables (sorted: other first)
    assert [v["source"]["snapshot"] for _, v in other[:3]] == \
        ["first", "true", "last_in_data_collection"]
    assert snap["source"]["snapshot"] == "last"
    assert created["after"]["name"] == "bob" and created["before"] is None
    assert updated["before"]["name"] == "bob" and updated["before"]["amount"] is None
    assert updated["after"]["name"] == "bob2" and updated["after"]["amount"] == "AA=="
    assert deleted["before"]["name"] == "bob2" and deleted["after"] is None
    moved_away, moved_to = events[5][1], events[7][1]
    # from the binlog Debezium writes a TIMESTAMP's fraction with the column's digits
    streamed = {**EXPECTED, "at": "2024-01-02T03:04:05.250Z"}
    assert moved_away["before"] == streamed and moved_to["after"] == {**streamed, "id": 5}
    for event in (created, updated, deleted, moved_away):
        source = event["source"]
        assert source["connector"] == "mariadb" and source["snapshot"] == "false"
        assert (source["db"], source["table"], source["server_id"]) == (name, "t", 1)
        assert source["file"] == "binlog.000001" and source["pos"] > 0
    # one database transaction: one GTID, changes in order across both tables
    assert created["source"]["gtid"] == updated["source"]["gtid"] == \
        other[3][1]["source"]["gtid"] != deleted["source"]["gtid"]
    assert created["source"]["pos"] < updated["source"]["pos"] < \
        other[3][1]["source"]["pos"] < deleted["source"]["pos"]


def test_ddl_is_followed_in_the_next_events(mariadb: MariaDBServer, broker: EmbeddedBroker,
                                            name: str) -> None:
    table = f"{name}.t"
    execute(mariadb, f"CREATE DATABASE {name}", f"CREATE TABLE {table} (id int PRIMARY KEY, "
                                                "a varchar(5))", f"INSERT INTO {table} VALUES (1, 'x')")
    with MySqlConnectorProcess(mariadb.dsn, table, broker.bootstrap_servers, name) as c:
        execute(mariadb, f"ALTER TABLE {table} ADD COLUMN rating decimal(4,1) DEFAULT 2.5")
        execute(mariadb, f"INSERT INTO {table} (id, a, rating) VALUES (2, 'y', 4.5)")
        execute(mariadb, f"ALTER TABLE {table} DROP COLUMN a, MODIFY rating int")
        execute(mariadb, f"UPDATE {table} SET rating = 7 WHERE id = 1")
        wait_events(broker, f"{name}.{table}", 3)
        c.kill()  # the shape after a restart comes from the binlog, not from memory
        execute(mariadb, "FLUSH BINARY LOGS")  # and the resume point survives a new file
        c.start()
        execute(mariadb, f"ALTER TABLE {table} ADD COLUMN note text")
        execute(mariadb, f"INSERT INTO {table} VALUES (3, 1, 'n')")
        events = wait_events(broker, f"{name}.{table}", 4)
    assert [v["after"] for _, v in events] == [
        {"id": 1, "a": "x"}, {"id": 2, "a": "y", "rating": "LQ=="},
        {"id": 1, "rating": 7}, {"id": 3, "rating": 1, "note": "n"}]
    assert events[2][1]["before"] == {"id": 1, "rating": 3}  # 2.5 as an int rounds to 3
    assert events[3][1]["source"]["file"] > events[2][1]["source"]["file"]


class Writer(threading.Thread):
    """Bumps ``v`` of random rows (and inserts new ones), one transaction at a time."""

    def __init__(self, db: MariaDBServer, table: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.db, self.table, self.rng = db, table, random.Random(seed)
        self.stop = threading.Event()
        self.transactions = 0

    def run(self) -> None:
        conn = pymysql.connect(host=self.db.host, port=self.db.port, user="root")
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


def _versions(events: list[Any]) -> dict[int, list[int]]:
    seen: dict[int, list[int]] = {}
    for key, value in events:
        if value is not None and value["after"] is not None:
            seen.setdefault(key["id"], []).append(value["after"]["v"])
    return seen


def test_kill_9_of_the_connector_loses_and_doubles_nothing(
        mariadb: MariaDBServer, broker: EmbeddedBroker, name: str) -> None:
    table = f"{name}.items"
    execute(mariadb, f"CREATE DATABASE {name}",
            f"CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)",
            f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, 1)" for i in range(50)))
    writer = Writer(mariadb, table, 2)
    writer.start()  # writes before, during and across the snapshot
    connector = MySqlConnectorProcess(mariadb.dsn, table, broker.bootstrap_servers, name)
    rng = random.Random(5)
    try:
        connector.start()
        try:
            for _ in range(4):  # at random points: snapshot, stream, between transactions
                time.sleep(rng.uniform(0.1, 0.8))
                connector.kill()
                connector.start()
            moving = writer.transactions
            wait_for(lambda: writer.transactions >= moving + 30, 30, "more transactions")
        finally:
            writer.stop.set()
            writer.join()
        final = dict(query(mariadb, f"SELECT id, v FROM {table}"))

        def caught_up() -> list[Any] | None:
            events = read_topic(broker.bootstrap_servers, f"{name}.{table}")
            last = {k: v[-1] for k, v in _versions(events).items()}
            return events if last == final else None

        events = wait_for(caught_up, 60, "the connector to catch up")
        assert connector.stop() == 0  # SIGTERM: a clean stop
    finally:
        writer.stop.set()
        connector.stop()
    seen = _versions(events)
    assert set(seen) == set(final)
    for key, versions in seen.items():  # every version once, in commit order
        assert versions == list(range(versions[0], final[key] + 1)), (key, versions)


@pytest.mark.parametrize("problem", ["missing table", "no primary key", "bad password",
                                     "no broker", "minimal binlog metadata",
                                     "TIME beyond connect's range"])
def test_bad_configuration_is_one_clear_line(mariadb: MariaDBServer, broker: EmbeddedBroker,
                                             name: str, problem: str) -> None:
    execute(mariadb, f"CREATE DATABASE {name}", f"CREATE TABLE {name}.nokey (a int)",
            f"CREATE TABLE {name}.t (id int PRIMARY KEY)",
            f"CREATE USER '{name}'@'%' IDENTIFIED BY 's3cret'")
    dsn, table, expected = mariadb.dsn, f"{name}.nokey", "no primary key"
    bootstrap = broker.bootstrap_servers
    if problem == "missing table":
        table, expected = f"{name}.ghost", "does not exist"
    elif problem == "bad password":
        dsn = f"mysql://{name}:wrong-s3cret@{mariadb.host}:{mariadb.port}/{name}"
        expected = f"cannot connect to mysql://{name}:***@"
    elif problem == "no broker":
        table, bootstrap, expected = f"{name}.t", "127.0.0.1:1", "cannot reach the Kafka brokers at"
    elif problem == "minimal binlog metadata":
        table, expected = f"{name}.t", "binlog_row_metadata is MINIMAL: capture needs"
        execute(mariadb, "SET GLOBAL binlog_row_metadata = MINIMAL")
    extra: tuple[str, ...] = ()
    if problem == "TIME beyond connect's range":
        execute(mariadb, f"CREATE TABLE {name}.times (id int PRIMARY KEY, tm time)",
                f"INSERT INTO {name}.times VALUES (1, '-01:02:03')")
        table, extra = f"{name}.times", ("--time-precision-mode", "connect")
        expected = ("TIME value -01:02:03 is outside 00:00:00-24:00:00: "
                    "time.precision.mode connect cannot represent it")
    connector = MySqlConnectorProcess(dsn, table, bootstrap, name, "--timeout-seconds", "2",
                                      *extra)
    try:
        with pytest.raises(Exception, match="exited during start-up") as e:
            connector.start()
    finally:
        execute(mariadb, "SET GLOBAL binlog_row_metadata = FULL")
    assert connector.process is not None and connector.process.returncode == 1
    lines = connector.output_lines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert "s3cret" not in str(e.value)


def test_status_shows_how_far_behind_the_binlog_the_log_is(
        mariadb: MariaDBServer, broker: EmbeddedBroker, name: str) -> None:
    """``cdc status`` with a mysql:// DSN: the connector's stored binlog position, the
    server's, the bytes between them, and a warning (exit status 2) past the threshold."""
    execute(mariadb, f"CREATE DATABASE {name}",
            f"CREATE TABLE {name}.quiet (id int PRIMARY KEY)",
            f"CREATE TABLE {name}.busy (id int PRIMARY KEY, pad text)")
    with MySqlConnectorProcess(mariadb.dsn, f"{name}.quiet", broker.bootstrap_servers, name):
        execute(mariadb, f"INSERT INTO {name}.quiet VALUES (1)")
        wait_events(broker, f"{name}.{name}.quiet", 1)
    (file, before), = [r[:2] for r in query(mariadb, "SHOW MASTER STATUS")]
    execute(mariadb, f"INSERT INTO {name}.busy SELECT seq, repeat('x', 1000) "
                     "FROM seq_1_to_1500")  # ~1.5 MB of binlog the connector has not read
    (file_after, after), = [r[:2] for r in query(mariadb, "SHOW MASTER STATUS")]
    assert file_after == file
    status = subprocess.run(
        [sys.executable, "-m", "headrace", "cdc", "status", "--dsn", mariadb.dsn, "--name",
         name, "--bootstrap-servers", broker.bootstrap_servers, "--warn-retained-mb", "1"],
        capture_output=True, text=True, timeout=scaled(60))
    assert status.returncode == 2, (status.stdout, status.stderr)
    first, second, *counts = status.stdout.splitlines()
    assert first.startswith(f"connector {name}: at {file}:") and \
        f", server at {file}:{after}, lag " in first, first
    behind = int(first.split(", lag ")[1].split(" bytes")[0])
    stored = int(first.split(f"at {file}:")[1].split(" ")[0].rstrip(","))
    assert behind == after - stored and stored <= before, first
    assert second.startswith("log: snapshot done; ") and second.endswith(
        " s since the last write"), second
    assert counts == [f"  {name}.{name}.quiet: 1 change events"]
    assert status.stderr.strip().splitlines() == [
        f"warning: connector {name} is {behind / 1_000_000:.1f} MB of binlog behind the "
        "server (more than --warn-retained-mb 1)"]
