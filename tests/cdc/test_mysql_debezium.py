"""Our MySQL/MariaDB change events against Debezium's own on the same server: Debezium's
MariaDB connector (3.5.0.Final, ``jvm/debezium-mariadb``: the newest Maven Central serves;
Debezium 3.6's MySQL connector refuses MariaDB) runs in its embedded engine while
``headrace cdc mysql`` captures the same table; every event must agree on key, op,
before, after and every source field but who wrote it and when it ran. The same Debezium
JVM runs two more engines with other settings on a second table (decimals and temporal
columns): ``decimal.handling.mode=string`` with ``time.precision.mode=connect``, and
``decimal.handling.mode=double``; a ``headrace cdc mysql`` with the same options each.
A fourth engine writes the first table with the JSON converter's schemas, against our
Avro through ``headrace registry`` (as ``test_types.py`` does for PostgreSQL: no Kafka
Connect Avro converter is on Maven Central): the decoded values against the JSON
payloads, each column's registered Avro type and ``connect.name`` against the Connect
schema as Confluent's AvroConverter would write it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from headrace import jvm
from headrace.testing import EmbeddedBroker, MariaDBServer
from tests.cdc.mysql_support import MySqlConnectorProcess, execute, mariadb
from tests.cdc.support import DebeziumProcess, read_topic, wait_until
from tests.cdc.test_types import CONNECT_TO_AVRO, avro_topic

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
# The second table: what decimal.handling.mode and time.precision.mode change (TIME within
# 00:00-24:00, the only range Kafka Connect's Time holds, as time.precision.mode=connect needs)
MODE_TYPES = ("id int PRIMARY KEY, amount decimal(10,2), neg decimal(5,3), "
              "big decimal(30,10), whole decimal(5,0), dt datetime(6), dt4 datetime(4), "
              "dt3 datetime(3), dt0 datetime, dd date, tm time(2), tm6 time(6), tm0 time, "
              "at timestamp(6) NULL, y year")
MODE_ROWS = (
    "(1, 10.50, -1.5, 12345678901234567890.0123456789, -99999, "
    "'2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.1234', '2024-01-02 03:04:05.5', "
    "'2024-01-02 03:04:05', '2024-01-02', '01:02:03.45', '23:59:59.999999', '24:00:00', "
    "'2024-01-02 03:04:05.000001', 2024)",
    "(2, 0, 0, -0.0000000001, 0, '1969-12-31 23:59:59.999999', '1000-01-01 00:00:00', "
    "'9999-12-31 23:59:59.999', '1969-12-31 23:59:59', '1000-01-01', '00:00:00', "
    "'00:00:00.000001', '12:00:00', NULL, 1901)",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
)
# (topic-prefix suffix, Debezium properties, our options)
MODES = (
    ("s", ("decimal.handling.mode=string", "time.precision.mode=connect"),
     ("--decimal-handling-mode", "string", "--time-precision-mode", "connect")),
    ("d", ("decimal.handling.mode=double",), ("--decimal-handling-mode", "double")),
)
# Differ by construction: who wrote the event (version, topic prefix) and when each ran
# (a snapshot's ts_ms is when that connector snapshotted).
IDENTITY = ("version", "name")
TIMING = ("ts_ms", "ts_us", "ts_ns")


class Debezium(DebeziumProcess):
    def __init__(self, db: MariaDBServer, database: str,
                 *captures: tuple[str, str, tuple[str, ...]]) -> None:
        """One engine per capture (topic prefix, table, properties), one JVM."""
        args: list[str] = []
        for i, (prefix, table, properties) in enumerate(captures):
            args += [*(["--"] if i else []), prefix, table, str(5402 + i), *properties]
        super().__init__([jvm.java_executable(), *jvm.extra_options(),
                          "-cp", jvm.classpath("debezium-mariadb"),
                          "io.headrace.debezium.DebeziumMariaDbCapture", db.host,
                          str(db.port), "root", database, *args])



def test_events_agree_with_debezium(mariadb: MariaDBServer, broker: EmbeddedBroker,
                                    registry: Any) -> None:
    name = f"t{uuid.uuid4().hex[:10]}"
    table, modes_table = f"{name}.t", f"{name}.m"
    execute(mariadb, f"CREATE DATABASE {name}", f"CREATE TABLE {table} ({TYPES})",
            f"INSERT INTO {table} VALUES {', '.join(ROWS)}",
            f"CREATE TABLE {modes_table} ({MODE_TYPES})",
            f"INSERT INTO {modes_table} VALUES {', '.join(MODE_ROWS)}")
    debezium = Debezium(mariadb, name, (f"{name}_dbz", table, ()),
                        *((f"{name}_dbz{s}", modes_table, props) for s, props, _ in MODES),
                        (f"{name}_dbza", table, ("key.converter.schemas.enable=true",
                                                 "value.converter.schemas.enable=true")))
    topic_avro, topic_theirs_avro = f"{name}a.{table}", f"{name}_dbza.{table}"
    topic_theirs = f"{name}_dbz.{table}"
    modes_topics = [(f"{name}{s}.{modes_table}", f"{name}_dbz{s}.{modes_table}")
                    for s, _, _ in MODES]
    try:
        wait_until(lambda: len(debezium.of(topic_theirs)) >= 3, "Debezium's snapshot")
        with MySqlConnectorProcess(mariadb.dsn, table, broker.bootstrap_servers, name), \
                MySqlConnectorProcess(mariadb.dsn, modes_table, broker.bootstrap_servers,
                                      f"{name}{MODES[0][0]}", "--server-id", "5411",
                                      *MODES[0][2]), \
                MySqlConnectorProcess(mariadb.dsn, modes_table, broker.bootstrap_servers,
                                      f"{name}{MODES[1][0]}", "--server-id", "5412",
                                      *MODES[1][2]), \
                MySqlConnectorProcess(mariadb.dsn, table, broker.bootstrap_servers,
                                      f"{name}a", "--server-id", "5413",
                                      "--schema-registry", registry.url):
            execute(mariadb, f"UPDATE {table} SET name = 'ADA', amount = 11, st = 'b', "
                             "tm = '12:00:00.01', b12 = 4095 WHERE id = 1",
                    f"UPDATE {table} SET u = 1, at = '2000-02-29 12:00:00' WHERE id = 2")
            execute(mariadb, f"INSERT INTO {table} (id, name) VALUES (4, 'bob')",
                    f"DELETE FROM {table} WHERE id = 4")
            execute(mariadb, f"ALTER TABLE {table} ADD COLUMN extra varchar(5) DEFAULT 'x'")
            execute(mariadb, f"UPDATE {table} SET id = 6 WHERE id = 3")
            execute(mariadb, f"UPDATE {modes_table} SET amount = -0.01, big = 0.5, "
                             "dt = '2000-02-29 12:00:00.000999', tm = '00:00:00.01', "
                             "tm6 = '10:11:12.345678' WHERE id = 1",
                    f"INSERT INTO {modes_table} (id, whole, dt4) VALUES "
                    "(4, 12345, '2024-06-30 23:59:59.9999')",
                    f"DELETE FROM {modes_table} WHERE id = 2")
            expected, modes_expected = 3 + 2 + 3 + 3, 3 + 1 + 1 + 2
            wait_until(lambda: len(debezium.of(topic_theirs)) >= expected, "Debezium's events")
            wait_until(lambda: len(read_topic(broker.bootstrap_servers, f"{name}.{table}"))
                  >= expected, "our events")
            for ours_topic, theirs_topic in modes_topics:
                wait_until(_enough(debezium.of, theirs_topic, modes_expected),
                      f"Debezium's {theirs_topic}")
                wait_until(_enough(lambda t: read_topic(broker.bootstrap_servers, t), ours_topic,
                              modes_expected), f"our {ours_topic}")
            wait_until(_enough(debezium.of, topic_theirs_avro, expected), "Debezium's schemas")
            schemas: dict[str, Any] = {}
            wait_until(_enough(lambda t: avro_topic(broker.bootstrap_servers, t, registry.url,
                                               schemas), topic_avro, expected), "our Avro")
            ours = read_topic(broker.bootstrap_servers, f"{name}.{table}")
            ours_avro = avro_topic(broker.bootstrap_servers, topic_avro, registry.url, schemas)
            ours_modes = [read_topic(broker.bootstrap_servers, t) for t, _ in modes_topics]
    finally:
        err = debezium.stop()
    theirs = debezium.of(topic_theirs)
    assert len(ours) == len(theirs) == expected, err[-2000:]
    differences = _differences("default", ours, theirs)
    for (_, theirs_topic), mine in zip(modes_topics, ours_modes, strict=True):
        reference = debezium.of(theirs_topic)
        assert len(mine) == len(reference) == modes_expected, (theirs_topic, err[-2000:])
        differences += _differences(theirs_topic, mine, reference)
    with_schemas = debezium.of(topic_theirs_avro)
    differences += _differences("avro", ours_avro, [(k["payload"], v and v["payload"])
                                                    for k, v in with_schemas])
    differences += _schema_differences(schemas[topic_avro],
                                       next(v["schema"] for _, v in with_schemas if v))
    assert not differences, "\n".join(map(str, differences))


def _schema_differences(ours: dict[str, Any], connect: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each column's Avro type (ours, the first registered version) against the Connect
    schema of Debezium's JSON converter, as Confluent's AvroConverter would write it."""
    found: list[tuple[Any, ...]] = []
    row = next(f for f in ours["fields"] if f["name"] == "before")["type"][1]
    our_fields = {f["name"]: f["type"] for f in row["fields"]}
    after = next(f for f in connect["fields"] if f["field"] == "after")
    for field in after["fields"]:
        column, kind = field["field"], our_fields.get(field["field"])
        if isinstance(kind, list):
            kind = kind[1]
        base = kind.get("type") if isinstance(kind, dict) else kind
        expected = CONNECT_TO_AVRO[field["type"]]
        if base != expected:
            found.append(("schema", column, base, expected, field))
        name = kind.get("connect.name") if isinstance(kind, dict) else None
        if name != field.get("name"):
            found.append(("schema name", column, name, field.get("name")))
    extra = set(our_fields) - {f["field"] for f in after["fields"]}
    if extra:
        found.append(("columns Debezium leaves out", sorted(extra)))
    return found


def _enough(read: Callable[[str], list[Any]], topic: str, count: int) -> Callable[[], bool]:
    return lambda: len(read(topic)) >= count


def _differences(what: str, ours: list[tuple[Any, Any]], theirs: list[tuple[Any, Any]]
                 ) -> list[tuple[Any, ...]]:
    """Every difference between two topics' events (not just the first)."""
    differences: list[tuple[Any, ...]] = []
    for i, ((our_key, our_value), (key, value)) in enumerate(zip(ours, theirs, strict=True)):
        if our_key != key:
            differences.append((what, i, "key", our_key, key))
        if value is None or our_value is None:
            if value != our_value:
                differences.append((what, i, "tombstone", our_value, value))
            continue
        if sorted(our_value) != sorted(value):
            differences.append((what, i, "fields", sorted(our_value), sorted(value)))
        for side in ("op", "transaction"):
            if our_value[side] != value[side]:
                differences.append((what, i, side, our_value[side], value[side]))
        for side in ("before", "after"):
            mine, reference = our_value[side] or {}, value[side] or {}
            for column in sorted(set(mine) | set(reference)):
                if mine.get(column, "<missing>") != reference.get(column, "<missing>"):
                    differences.append((what, i, value["op"], side, column, mine.get(column),
                                        reference.get(column, "<missing>")))
        ours_source, source = our_value["source"], value["source"]
        skip = IDENTITY + (TIMING if value["op"] == "r" else ())
        for field in sorted((set(source) | set(ours_source)) - set(skip)):
            if ours_source.get(field) != source.get(field, "<missing>"):
                differences.append((what, i, value["op"], "source", field,
                                    ours_source.get(field), source.get(field, "<missing>")))
    return differences
