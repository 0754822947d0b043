"""Our change events against Debezium's own, on the same database: Debezium 3.6's
PostgreSQL connector runs in its embedded engine (``jvm/debezium``, from Maven Central) on
a slot of its own while ``headrace cdc`` captures the same table; every event must agree
on key, op, before, after and the source fields both define the same way."""

from __future__ import annotations

from headrace import jvm
from headrace.testing import EmbeddedBroker, PostgresServer
from tests.cdc.support import ConnectorProcess, DebeziumProcess, execute, read_topic, wait_until

TYPES = ("id int PRIMARY KEY, name text, amount numeric(10,2), at timestamptz, ts timestamp, "
         "ts3 timestamp(3), d date, tags text[], doc jsonb, raw bytea, u uuid, ok boolean, "
         "f float8, n int8, tm time, small smallint, r real")
ROW = ("1, 'ada', 10.50, '2024-01-02 03:04:05.25+00', '2024-01-02 03:04:05.123456', "
       "'2024-01-02 03:04:05.123', '2024-01-02', '{a,b}', '{\"k\": 1}', '\\x0102', "
       "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true, 0.5, 9007199254740993, '01:02:03.5', 7, 1.5")
# Fields where the two differ by construction: who we are, when each ran, and Debezium's
# snapshot's txId and LSN (each connector snapshots at its own slot's point) and the
# last-commit position in `sequence`.
SOURCE_FIELDS = ("connector", "snapshot", "db", "schema", "table", "xmin", "origin",
                 "origin_lsn")


class Debezium(DebeziumProcess):
    """Debezium's embedded engine capturing ``table`` (a comma-separated include list) on
    slot ``name`` (also its topic prefix); ``props``: more connector properties,
    ``name=value``. ``more``: further captures (table, name, props) in the same JVM."""

    def __init__(self, pg: PostgresServer, table: str, name: str, *props: str,
                 more: tuple[tuple[str, str, tuple[str, ...]], ...] = ()) -> None:
        captures: list[str] = [name, table, name, *props]
        for other_table, other_name, other_props in more:
            captures += ["--", other_name, other_table, other_name, *other_props]
        super().__init__([jvm.java_executable(), *jvm.extra_options(),
                          "-cp", jvm.classpath("debezium"),
                          "io.headrace.debezium.DebeziumCapture", pg.host, str(pg.port),
                          "postgres", "postgres", *captures])



def test_events_agree_with_debezium(postgres: PostgresServer, broker: EmbeddedBroker,
                                    name: str) -> None:
    table = f"{name}.t"
    execute(postgres.dsn, f"CREATE SCHEMA {name}", f"CREATE TABLE {table} ({TYPES})",
            f"INSERT INTO {table} VALUES ({ROW})")
    debezium = Debezium(postgres, table, f"{name}_dbz")
    try:
        with ConnectorProcess(postgres.dsn, table, broker.bootstrap_servers, name):
            topic_theirs = f"{name}_dbz.{table}"
            wait_until(lambda: debezium.of(topic_theirs), "Debezium's snapshot")
            execute(postgres.dsn, f"UPDATE {table} SET name = 'ADA', amount = 11, "
                                  "tags = '{c}' WHERE id = 1")
            execute(postgres.dsn, f"INSERT INTO {table} (id, name) VALUES (2, 'bob')",
                    f"DELETE FROM {table} WHERE id = 2")
            wait_until(lambda: len(debezium.of(topic_theirs)) >= 5, "Debezium's events")
            wait_until(lambda: len(read_topic(broker.bootstrap_servers, f"{name}.{table}")) >= 5,
                  "our events")
            ours = read_topic(broker.bootstrap_servers, f"{name}.{table}")
    finally:
        err = debezium.stop()
    theirs = debezium.of(topic_theirs)
    assert len(ours) == len(theirs) == 5, err[-2000:]
    for (our_key, our_value), (key, value) in zip(ours, theirs, strict=True):
        assert our_key == key
        if value is None:
            assert our_value is None
            continue
        assert our_value is not None
        assert sorted(our_value) == sorted(value)
        for side in ("op", "before", "after"):
            assert our_value[side] == value[side], (side, our_value[side], value[side])
        assert sorted(our_value["source"]) == sorted(value["source"])
        for field in SOURCE_FIELDS:
            assert our_value["source"][field] == value["source"][field], field
        if value["op"] != "r":
            assert our_value["source"]["txId"] == value["source"]["txId"]
            assert our_value["source"]["lsn"] == value["source"]["lsn"]
            assert our_value["source"]["ts_us"] == value["source"]["ts_us"]
    execute(postgres.dsn, f"SELECT pg_drop_replication_slot('{name}_dbz')")
