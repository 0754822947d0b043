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

The Avro setting: no Kafka Connect Avro converter is on Maven Central (Confluent's is not
there; Apicurio's converter speaks Apicurio's own registry API), so Debezium runs with
its JSON converter with schemas, and our Avro through ``headrace registry`` is checked
against it: the decoded values against the JSON payloads, and each column's registered
Avro type and ``connect.name`` against the Connect schema as Confluent's AvroConverter
would write it.
"""

from __future__ import annotations

import threading
import time
import traceback
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
    # Debezium's JSON converter with its schemas against our Avro through the registry
    "avro": (("key.converter.schemas.enable=true", "value.converter.schemas.enable=true"),
             ()),
}
# Kafka Connect's schema types as Confluent's AvroConverter writes them in Avro
CONNECT_TO_AVRO = {"int8": "int", "int16": "int", "int32": "int", "int64": "long",
                   "float": "float", "double": "double", "boolean": "boolean",
                   "string": "string", "bytes": "bytes", "struct": "record",
                   "array": "array"}
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
        if sorted(our) != sorted(their):
            found.append(f"{where} envelope fields {sorted(our)} != {sorted(their)}")
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

    def __init__(self, postgres: PostgresServer, broker: EmbeddedBroker, setting: str,
                 registry_url: str) -> None:
        self.postgres, self.broker, self.setting = postgres, broker, setting
        self.registry_url = registry_url
        self.schemas: dict[str, Any] = {}
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
        self.tables.sort()  # both snapshot in the order of their list
        self.ours: dict[str, list[Any]] = {}
        self.theirs: dict[str, list[Any]] = {}
        self.log = ""
        self.debezium: Debezium
        self.connect_schemas: dict[str, list[Any]] = {}

    def start(self) -> None:
        execute(self.postgres.dsn, *self.setup)
        qualified = ",".join(f"{self.name}.{t}" for t in self.tables)
        their_props, our_args = SETTINGS[self.setting]
        if self.setting == "avro":
            our_args = ("--schema-registry", self.registry_url)
        self.qualified, self.props = qualified, their_props
        self.connector = ConnectorProcess(self.postgres.dsn, qualified,
                                          self.broker.bootstrap_servers, self.name, *our_args)

    def run(self) -> None:
        """Our connector up, Debezium's snapshot done, the changes, both streams' ends."""
        dsn, schema, name = self.postgres.dsn, self.name, self.name
        with self.connector:
            _wait(lambda: any(v and (v.get("payload") or v).get("source", {}).get(
                "snapshot") == "last" and t.startswith(f"{name}_dbz.")
                for t, _, v in list(self.debezium.events)), "Debezium's snapshot")
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
            _wait(lambda: len(self.read(f"{name}.{done}")) == 1, "our end")
            self.ours = {t: self.read(f"{name}.{schema}.{t}") for t in self.tables}

    def read(self, topic: str) -> list[Any]:
        if self.setting != "avro":
            return read_topic(self.broker.bootstrap_servers, topic)
        return avro_topic(self.broker.bootstrap_servers, topic, self.registry_url,
                          self.schemas)



@pytest.fixture(scope="module")
def captures(postgres: PostgresServer, broker: EmbeddedBroker,
             registry: Any) -> Iterator[dict[str, Capture]]:
    """Every setting's capture, run side by side (their waits overlap)."""
    execute(postgres.dsn, *matrix.SETUP)
    runs = {setting: Capture(postgres, broker, setting, registry.url) for setting in SETTINGS}
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
                traceback.print_exc()

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
        if capture.setting == "avro":  # the schemas aside, the payloads compared as JSON
            capture.connect_schemas = {t: [v["schema"] for _, v in events if v]
                                       for t, events in capture.theirs.items()}
            capture.theirs = {t: [(k["payload"], v and v["payload"]) for k, v in events]
                              for t, events in capture.theirs.items()}
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
    if setting == "avro":
        differences += _schema_differences(capture)
    assert not differences, "\n".join(differences[:60])


def _schema_differences(capture: Capture) -> list[str]:
    """Each column's Avro type (ours, from the registry) against the Connect schema of
    Debezium's JSON converter, as Confluent's AvroConverter would write it."""
    found = []
    ours = capture.schemas[f"{capture.name}.{capture.name}.types"]
    row = next(f for f in ours["fields"] if f["name"] == "before")["type"][1]
    our_fields = {f["name"]: f["type"] for f in row["fields"]}
    their = capture.connect_schemas["types"][0]
    after = next(f for f in their["fields"] if f["field"] == "after")
    for field in after["fields"]:
        column, kind = field["field"], our_fields.get(field["field"])
        if isinstance(kind, list):
            kind = kind[1]
        base = kind.get("type") if isinstance(kind, dict) else kind
        expected = CONNECT_TO_AVRO[field["type"]]
        if base != expected and not (expected == "record" and isinstance(kind, str)):
            found.append(f"schema of {column}: {base} != {expected} ({field})")
        name = kind.get("connect.name") if isinstance(kind, dict) else None
        if field.get("name") and name != field["name"] and expected != "record":
            found.append(f"schema name of {column}: {name} != {field['name']}")
    extra = set(our_fields) - {f["field"] for f in after["fields"]}
    if extra:
        found.append(f"columns Debezium leaves out: {sorted(extra)}")
    return found


def avro_topic(bootstrap: str, topic: str, registry_url: str,
               schemas: dict[str, Any]) -> list[Any]:
    """A topic's Avro records decoded through the registry, in the JSON converter's terms
    (bytes as base64, NaN and the infinities as strings, floats at 32-bit precision);
    the value schema in ``schemas[topic]``."""
    import json

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    decode = AvroDeserializer(client)
    out = []
    for key, value in _raw(bootstrap, topic):
        if value is not None and topic not in schemas:
            schema_id = int.from_bytes(value[1:5], "big")
            schemas[topic] = json.loads(client.get_schema(schema_id).schema_str)
        k = decode(key, SerializationContext(topic, MessageField.KEY))
        v = None if value is None else decode(value, SerializationContext(topic,
                                                                          MessageField.VALUE))
        out.append((_as_json(k, None), _as_json(v, None)))
    row = None
    if topic in schemas:
        before = next(f for f in schemas[topic]["fields"] if f["name"] == "before")
        row = {f["name"]: f["type"] for f in before["type"][1]["fields"]}
    for _, v in out:
        for side in ("before", "after"):
            if v is not None and v[side] is not None and row is not None:
                v[side] = {c: _float32(x) if _is_float(row.get(c)) else x
                           for c, x in v[side].items()}
    return out


def _is_float(kind: Any) -> bool:
    return kind == ["null", "float"] or kind == "float"


def _float32(value: Any) -> Any:
    import struct

    if not isinstance(value, float):
        return value
    for digits in range(2, 10):
        short = float(f"{value:.{digits}g}")
        if struct.unpack("<f", struct.pack("<f", short))[0] == value:
            return short
    return value


def _as_json(value: Any, _kind: Any) -> Any:
    import base64
    import math

    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _as_json(v, None) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_json(v, None) for v in value]
    return value


def _raw(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
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
