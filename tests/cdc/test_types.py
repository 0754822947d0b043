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

import threading
import time
import uuid
from collections.abc import Iterator
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
    first_streamed = True
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
        if their["op"] != "r" and first_streamed:
            # Debezium's sequence of its first streamed change starts with whatever it
            # processed last (null, the change's own LSN or a heartbeat's): timing
            skip |= {"sequence"}
            first_streamed = False
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


class Capture:
    """Both connectors on one schema of their own, under one setting."""

    def __init__(self, postgres: PostgresServer, broker: EmbeddedBroker, setting: str) -> None:
        self.postgres, self.broker, self.setting = postgres, broker, setting
        self.name = schema = f"t{uuid.uuid4().hex[:10]}"
        rows = matrix.rows(schema)
        self.setup = [f"CREATE SCHEMA {schema}", *matrix.schema_setup(schema),
                      matrix.create(schema, "types"),
                      *[matrix.insert(schema, "types", k, k + 1) for k in range(rows)],
                      f"CREATE TABLE {schema}.zz_done (id int PRIMARY KEY)"]
        self.changes = [*[matrix.update(schema, "types", k, k + 1) for k in range(rows)],
                        *[f"DELETE FROM {schema}.types WHERE id = {k + 1}"
                          for k in range(rows)]]
        self.tables = ["types", "zz_done"]
        if setting == "defaults":
            identity_setup, identity_changes = matrix.identity_tables(schema)
            toast_setup, toast_changes = matrix.toast_table(schema)
            self.setup += identity_setup + toast_setup
            self.changes += identity_changes + toast_changes
            self.tables += ["rid_default", "rid_full", "rid_index", "rid_nothing", "toasted"]
        self.tables.sort()  # Debezium snapshots tables in name order
        self.ours: dict[str, list[Any]] = {}
        self.theirs: dict[str, list[Any]] = {}
        self.log = ""
        self.debezium: Debezium

    def start(self) -> None:
        execute(self.postgres.dsn, *self.setup)
        qualified = ",".join(f"{self.name}.{t}" for t in self.tables)
        their_props, our_args = SETTINGS[self.setting]
        self.qualified, self.props = qualified, their_props
        self.connector = ConnectorProcess(self.postgres.dsn, qualified,
                                          self.broker.bootstrap_servers, self.name, *our_args)

    def run(self) -> None:
        """Our connector up, Debezium's snapshot done, the changes, both streams' ends."""
        dsn, schema, name = self.postgres.dsn, self.name, self.name
        with self.connector:
            _wait(lambda: any(v and v.get("source", {}).get("snapshot") == "last"
                              for _, _, v in list(self.debezium.events)), "Debezium's snapshot")
            for statement in self.changes:  # each its own transaction
                execute(dsn, statement)
            if self.setting == "defaults":
                for statement in (f"UPDATE {schema}.rid_nothing SET a = 'c' WHERE id = 1",
                                  f"DELETE FROM {schema}.rid_nothing WHERE id = 1"):
                    # PostgreSQL refuses them: nothing to capture under NOTHING
                    with pytest.raises(Exception, match="does not have a replica identity"):
                        execute(dsn, statement)
            execute(dsn, f"INSERT INTO {schema}.zz_done VALUES (1)")
            done = f"{schema}.zz_done"
            _wait(lambda: len(self.debezium.of(f"{name}_dbz.{done}")) == 1, "Debezium's end")
            _wait(lambda: len(read_topic(self.broker.bootstrap_servers, f"{name}.{done}")) == 1,
                  "our end")
            self.ours = {t: read_topic(self.broker.bootstrap_servers, f"{name}.{schema}.{t}")
                         for t in self.tables}



@pytest.fixture(scope="module")
def captures(postgres: PostgresServer, broker: EmbeddedBroker) -> Iterator[dict[str, Capture]]:
    """Every setting's capture, run side by side (their waits overlap)."""
    execute(postgres.dsn, *matrix.SETUP)
    runs = {setting: Capture(postgres, broker, setting) for setting in SETTINGS}
    failures: dict[str, BaseException] = {}
    for capture in runs.values():
        capture.start()
    # one JVM, one engine per setting
    first, *others = runs.values()
    debezium = Debezium(postgres, first.qualified, f"{first.name}_dbz", *first.props,
                        more=tuple((c.qualified, f"{c.name}_dbz", c.props) for c in others))
    try:
        for capture in runs.values():
            capture.debezium = debezium

        def run(capture: Capture) -> None:
            try:
                capture.run()
            except BaseException as e:  # reported by that setting's test
                failures[capture.setting] = e

        threads = [threading.Thread(target=run, args=(c,)) for c in runs.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        log = debezium.stop()
    for capture in runs.values():
        capture.log = log
    for setting, error in failures.items():
        runs[setting].log = f"{error!r}"
    for capture in runs.values():
        capture.theirs = {t: debezium.of(f"{capture.name}_dbz.{capture.name}.{t}")
                          for t in capture.tables}
        execute(postgres.dsn, f"SELECT pg_drop_replication_slot('{capture.name}_dbz')")
    yield runs


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_every_type_as_debezium_gives_it(captures: dict[str, Capture], setting: str) -> None:
    capture = captures[setting]
    differences = []
    for t in capture.tables:
        differences += _differences(t, capture.ours.get(t, []), capture.theirs.get(t, []))
    rows = matrix.rows(capture.name)
    assert len(capture.ours.get("types", [])) == 4 * rows, capture.log[-2000:]
    assert not differences, "\n".join(differences[:60])
