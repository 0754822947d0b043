"""Our MySQL/MariaDB change events against Debezium's own on the same server: Debezium's
MariaDB connector (3.5.0.Final, ``jvm/debezium-mariadb``: the newest Maven Central serves;
Debezium 3.6's MySQL connector refuses MariaDB) runs in its embedded engine while
``headrace cdc mysql`` captures the same table; every event must agree on key, op,
before, after and every source field but who wrote it and when it ran."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from typing import Any

from headrace import jvm
from headrace.testing import EmbeddedBroker, MariaDBServer, scaled
from tests.cdc.mysql_support import MySqlConnectorProcess, execute, mariadb
from tests.cdc.support import read_topic

__all__ = ["mariadb"]  # the module's MariaDB fixture

TYPES = ("id int PRIMARY KEY, name varchar(20), amount decimal(10,2), neg decimal(5,3), "
         "big decimal(30,10), f float, d double, at timestamp(3) NULL, at6 timestamp(6) NULL, "
         "at0 timestamp NULL, dt datetime(6), dt3 datetime(3), dt0 datetime, dd date, "
         "tm time(2), tm0 time, y year, b bit(1), b12 bit(12), b64 bit(64), "
         "e enum('x','y'), st set('a','b','c'), raw varbinary(10), bin binary(3), "
         "ch char(4), txt text, blb blob, j json, u bigint unsigned, n bigint, ti tinyint, "
         "tu tinyint unsigned, ui int unsigned, i int, si smallint, su smallint unsigned, "
         "mi mediumint, mu mediumint unsigned, bo boolean")
ROWS = (
    "(1, 'ada', 10.50, -1.5, 12345678901234567890.0123456789, 0.1, 0.1, "
    "'2024-01-02 03:04:05.250', '2024-01-02 03:04:05.000001', '2024-01-02 03:04:05', "
    "'2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.5', '2024-01-02 03:04:05', "
    "'2024-01-02', '-01:02:03.5', '838:59:59', 2024, 1, 5, x'8000000000000001', 'y', 'c,a', "
    "x'0102', x'01', 'ab', 'héllo ☃', x'ff00', '{\"k\": [1, 2.5, null]}', "
    "18446744073709551615, -9223372036854775808, -128, 255, 4294967295, -2147483648, "
    "-32768, 65535, -8388608, 16777215, true)",
    "(2, '', 0, 0, -0.0000000001, -3.4e38, 1.7976931348623157e308, '1970-01-01 00:00:01', "
    "'2038-01-19 03:14:07.999999', NULL, '1000-01-01 00:00:00', '9999-12-31 23:59:59.999', "
    "'1969-12-31 23:59:59', '1000-01-01', '-838:59:59', '00:00:00', 1901, 0, 0, x'00', "
    "'x', '', '', x'000000', '', '', '', '[]', 0, 9223372036854775807, 127, 0, 0, "
    "2147483647, 32767, 0, 8388607, 0, false)",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
)
# Differ by construction: who wrote the event (version, topic prefix) and when each ran
# (a snapshot's ts_ms is when that connector snapshotted).
IDENTITY = ("version", "name")
TIMING = ("ts_ms", "ts_us", "ts_ns")


class Debezium:
    def __init__(self, db: MariaDBServer, database: str, table: str, prefix: str) -> None:
        self.events: list[tuple[str, Any, Any]] = []
        self.process = subprocess.Popen(
            [jvm.java_executable(), "-cp", jvm.classpath("debezium-mariadb"),
             "io.headrace.debezium.DebeziumMariaDbCapture", db.host, str(db.port), "root",
             database, prefix, table, "5402"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            topic, key, value = line.rstrip("\n").split("\t", 2)
            self.events.append((topic, json.loads(key), json.loads(value)))

    def of(self, topic: str) -> list[tuple[Any, Any]]:
        return [(k, v) for t, k, v in list(self.events) if t == topic]

    def stop(self) -> str:
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        try:
            self.process.wait(scaled(30))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return self.process.stderr.read()


def _wait(predicate: Any, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_events_agree_with_debezium(mariadb: MariaDBServer, broker: EmbeddedBroker) -> None:
    name = f"t{uuid.uuid4().hex[:10]}"
    table = f"{name}.t"
    execute(mariadb, f"CREATE DATABASE {name}", f"CREATE TABLE {table} ({TYPES})",
            f"INSERT INTO {table} VALUES {', '.join(ROWS)}")
    debezium = Debezium(mariadb, name, table, f"{name}_dbz")
    topic_theirs = f"{name}_dbz.{table}"
    try:
        _wait(lambda: len(debezium.of(topic_theirs)) >= 3, "Debezium's snapshot")
        with MySqlConnectorProcess(mariadb.dsn, table, broker.bootstrap_servers, name):
            execute(mariadb, f"UPDATE {table} SET name = 'ADA', amount = 11, st = 'b', "
                             "tm = '12:00:00.01', b12 = 4095 WHERE id = 1",
                    f"UPDATE {table} SET u = 1, at = '2000-02-29 12:00:00' WHERE id = 2")
            execute(mariadb, f"INSERT INTO {table} (id, name) VALUES (4, 'bob')",
                    f"DELETE FROM {table} WHERE id = 4")
            execute(mariadb, f"ALTER TABLE {table} ADD COLUMN extra varchar(5) DEFAULT 'x'")
            execute(mariadb, f"UPDATE {table} SET id = 6 WHERE id = 3")
            expected = 3 + 2 + 3 + 3
            _wait(lambda: len(debezium.of(topic_theirs)) >= expected, "Debezium's events")
            _wait(lambda: len(read_topic(broker.bootstrap_servers, f"{name}.{table}"))
                  >= expected, "our events")
            ours = read_topic(broker.bootstrap_servers, f"{name}.{table}")
    finally:
        err = debezium.stop()
    theirs = debezium.of(topic_theirs)
    assert len(ours) == len(theirs) == expected, err[-2000:]
    differences: list[tuple[Any, ...]] = []  # every one, not just the first
    for i, ((our_key, our_value), (key, value)) in enumerate(zip(ours, theirs, strict=True)):
        if our_key != key:
            differences.append((i, "key", our_key, key))
        if value is None or our_value is None:
            if value != our_value:
                differences.append((i, "tombstone", our_value, value))
            continue
        if sorted(our_value) != sorted(value):
            differences.append((i, "fields", sorted(our_value), sorted(value)))
        for side in ("op", "transaction"):
            if our_value[side] != value[side]:
                differences.append((i, side, our_value[side], value[side]))
        for side in ("before", "after"):
            mine, reference = our_value[side] or {}, value[side] or {}
            for column in sorted(set(mine) | set(reference)):
                if mine.get(column, "<missing>") != reference.get(column, "<missing>"):
                    differences.append((i, value["op"], side, column, mine.get(column),
                                        reference.get(column, "<missing>")))
        ours_source, source = our_value["source"], value["source"]
        skip = IDENTITY + (TIMING if value["op"] == "r" else ())
        for field in sorted((set(source) | set(ours_source)) - set(skip)):
            if ours_source.get(field) != source.get(field, "<missing>"):
                differences.append((i, value["op"], "source", field, ours_source.get(field),
                                    source.get(field, "<missing>")))
    assert not differences, "\n".join(map(str, differences))
