"""The type matrix: our change events against Debezium 3.6's embedded engine on the same
database, value for value, under Debezium's default settings and each other
``decimal.handling.mode`` and ``time.precision.mode``.

One schema per setting holds the wide table of every type family (``matrix.py``: each
value at its edges, inserted before the capture starts so that it comes through the
snapshot, then updated to the next row's values and deleted, through the WAL) and, under
the defaults, the tables of each replica identity and a table of TOASTed values left
unchanged by an update. Both capture the schema at once (our connector through its CLI, a
broker in between); a last insert into ``done`` marks the end of both streams. Every
event must agree on key, op, before, after and the source fields except the timing ones
(``ts_*``), the connector's name and version, and for snapshot rows the slot's position
and the snapshot's transaction (each connector snapshots on its own slot, in its own
transaction: both must give a txId).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from headrace.testing import EmbeddedBroker, PostgresServer, scaled
from tests.cdc import matrix
from tests.cdc.support import ConnectorProcess, execute, read_topic
from tests.cdc.test_debezium import Debezium

SETTINGS = {
    "defaults": ((), ()),
    "decimal-string": (("decimal.handling.mode=string",), ("--decimal-handling-mode", "string")),
    "decimal-double": (("decimal.handling.mode=double",), ("--decimal-handling-mode", "double")),
    "time-connect": (("time.precision.mode=connect",), ("--time-precision-mode", "connect")),
}
TIMING = {"ts_ms", "ts_us", "ts_ns", "version", "name"}
SNAPSHOT_POSITION = {"lsn", "sequence", "txId"}


def _differences(topic: str, ours: list[Any], theirs: list[Any]) -> list[str]:
    found = []
    if len(ours) != len(theirs):
        found.append(f"{topic}: {len(ours)} events, Debezium {len(theirs)}")
    for i, ((our_key, our), (key, their)) in enumerate(zip(ours, theirs, strict=False)):
        where = f"{topic}[{i}]"
        if our_key != key:
            found.append(f"{where} key {our_key} != {key}")
        if our is None or their is None:
            if our != their:
                found.append(f"{where} tombstone {our} != {their}")
            continue
        if our["op"] != their["op"]:
            found.append(f"{where} op {our['op']} != {their['op']}")
            continue
        for side in ("before", "after"):
            a, b = our[side], their[side]
            if a is None or b is None:
                if a != b:
                    found.append(f"{where} {side} {a} != {b}")
                continue
            for column in sorted(set(a) | set(b)):
                if a.get(column, "<absent>") != b.get(column, "<absent>"):
                    found.append(f"{where} {their['op']} {side}.{column} "
                                 f"{a.get(column, '<absent>')!r} != "
                                 f"{b.get(column, '<absent>')!r}")
        skip = TIMING | (SNAPSHOT_POSITION if their["op"] == "r" else set())
        for field in sorted(set(our["source"]) | set(their["source"])):
            if field not in skip and our["source"].get(field) != their["source"].get(field):
                found.append(f"{where} source.{field} {our['source'].get(field)!r} != "
                             f"{their['source'].get(field)!r}")
        if their["op"] == "r" and not isinstance(our["source"]["txId"], int):
            found.append(f"{where} snapshot txId {our['source']['txId']!r}")
    return found


def _wait(predicate: Any, what: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + scaled(timeout)
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return found


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_every_type_as_debezium_gives_it(postgres: PostgresServer, broker: EmbeddedBroker,
                                        name: str, setting: str) -> None:
    dsn, schema = postgres.dsn, name
    their_props, our_args = SETTINGS[setting]
    rows = matrix.rows(schema)
    setup = [*matrix.SETUP, f"CREATE SCHEMA {schema}", *matrix.schema_setup(schema),
             matrix.create(schema, "types"),
             *[matrix.insert(schema, "types", k, k + 1) for k in range(rows)],
             f"CREATE TABLE {schema}.zz_done (id int PRIMARY KEY)"]
    changes = [*[matrix.update(schema, "types", k, k + 1) for k in range(rows)],
               *[f"DELETE FROM {schema}.types WHERE id = {k + 1}" for k in range(rows)]]
    tables = ["types", "zz_done"]
    if setting == "defaults":
        identity_setup, identity_changes = matrix.identity_tables(schema)
        toast_setup, toast_changes = matrix.toast_table(schema)
        setup += identity_setup + toast_setup
        changes += identity_changes + toast_changes
        tables += ["rid_default", "rid_full", "rid_index", "rid_nothing", "toasted"]
    tables.sort()  # Debezium snapshots tables in name order
    execute(dsn, *setup)
    qualified = ",".join(f"{schema}.{t}" for t in tables)
    debezium = Debezium(postgres, qualified, f"{name}_dbz", *their_props)
    try:
        with ConnectorProcess(dsn, qualified, broker.bootstrap_servers, name, *our_args):
            _wait(lambda: any(v and v.get("source", {}).get("snapshot") == "last"
                              for _, _, v in list(debezium.events)), "Debezium's snapshot")
            for statement in changes:  # each its own transaction, as in matrix.py
                execute(dsn, statement)
            for statement in (f"UPDATE {schema}.rid_nothing SET a = 'c' WHERE id = 1",
                              f"DELETE FROM {schema}.rid_nothing WHERE id = 1"):
                if setting == "defaults":  # PostgreSQL refuses: nothing to capture
                    with pytest.raises(Exception, match="does not have a replica identity"):
                        execute(dsn, statement)
            execute(dsn, f"INSERT INTO {schema}.zz_done VALUES (1)")
            done = f"{schema}.zz_done"
            _wait(lambda: len(debezium.of(f"{name}_dbz.{done}")) == 1, "Debezium's end")
            _wait(lambda: len(read_topic(broker.bootstrap_servers, f"{name}.{done}")) == 1,
                  "our end")
            ours = {t: read_topic(broker.bootstrap_servers, f"{name}.{schema}.{t}")
                    for t in tables}
    finally:
        log = debezium.stop()
    differences = []
    for t in tables:
        theirs = debezium.of(f"{name}_dbz.{schema}.{t}")
        differences += _differences(t, ours[t], theirs)
    assert len(ours["types"]) == 4 * rows, log[-2000:]
    assert not differences, "\n".join(differences[:60])
    execute(dsn, f"SELECT pg_drop_replication_slot('{name}_dbz')")
