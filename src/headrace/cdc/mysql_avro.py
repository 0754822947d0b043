"""MySQL/MariaDB change events as Avro through a schema registry, the way Debezium's
MySQL/MariaDB connectors write them with Confluent's ``AvroConverter``.

The registration, framing and value handling are ``avro.AvroEncoder``'s (shared with
PostgreSQL); this module gives the MySQL column types (``avro_type``) and the MySQL
``source`` record. Types follow Debezium's Connect schemas: TINYINT, SMALLINT, MEDIUMINT,
INT int, BIGINT and INT UNSIGNED long, FLOAT float, DOUBLE double, DECIMAL bytes (Connect's
``Decimal``; double or string by ``decimal.handling.mode``), BIT(1) boolean, BIT(n) bytes
(``Bits``), DATE int (``Date``), TIME long (``MicroTime``), DATETIME long (``Timestamp`` or
``MicroTimestamp``), with ``time.precision.mode=connect`` Kafka Connect's ``Date``,
``Time`` (int) and ``Timestamp``; TIMESTAMP string (``ZonedTimestamp``), YEAR int
(``Year``), ENUM/SET string (``Enum``/``EnumSet``), JSON string (``Json``), binary
columns bytes, the rest string. Non-key columns are optional.
"""

from __future__ import annotations

from typing import Any

import fastavro

from headrace.cdc.avro import AvroEncoder, connect_named, defined_once
from headrace.cdc.mysql import Table
from headrace.cdc.mysql_values import DEFAULT_MODES, ColumnType, Modes


def source_schema(connector: str) -> dict[str, Any]:
    """Debezium's ``source`` record of the ``mysql`` or ``mariadb`` connector."""
    def optional(name: str, kind: str) -> dict[str, Any]:
        return {"name": name, "type": ["null", kind], "default": None}

    return {"type": "record", "name": "Source",
            "namespace": f"io.debezium.connector.{connector}",
            "fields": [
                {"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
                {"name": "name", "type": "string"}, {"name": "ts_ms", "type": "long"},
                optional("snapshot", "string"), {"name": "db", "type": "string"},
                optional("sequence", "string"), optional("ts_us", "long"),
                optional("ts_ns", "long"), optional("table", "string"),
                {"name": "server_id", "type": "long"}, optional("gtid", "string"),
                {"name": "file", "type": "string"}, {"name": "pos", "type": "long"},
                {"name": "row", "type": "int"}, optional("thread", "long"),
                optional("query", "string")]}


def avro_type(col: ColumnType, modes: Modes = DEFAULT_MODES) -> Any:
    """The Avro type of a column as Confluent's AvroConverter writes Debezium's Connect
    schema for it (semantic types named by ``connect.name``)."""
    kind = col.kind
    connect = modes.time == "connect"
    if kind == "int":
        return "long" if col.wide else "int"
    if kind == "decimal":
        if modes.decimal in ("double", "string"):
            return modes.decimal
        return connect_named("bytes", "org.apache.kafka.connect.data.Decimal",
                      **{"connect.parameters": {"scale": str(col.scale)}})
    if kind in ("float", "double"):
        return kind
    if kind == "bit":
        return "boolean" if col.bits == 1 else connect_named("bytes", "io.debezium.data.Bits")
    if kind == "date":
        return connect_named("int", "org.apache.kafka.connect.data.Date" if connect else
                      "io.debezium.time.Date")
    if kind == "time":
        return connect_named("int", "org.apache.kafka.connect.data.Time") if connect else \
            connect_named("long", "io.debezium.time.MicroTime")
    if kind == "datetime":
        if connect:
            return connect_named("long", "org.apache.kafka.connect.data.Timestamp")
        return connect_named("long", "io.debezium.time.Timestamp" if col.fsp <= 3 else
                      "io.debezium.time.MicroTimestamp")
    if kind == "timestamp":
        return connect_named("string", "io.debezium.time.ZonedTimestamp")
    if kind == "year":
        return connect_named("int", "io.debezium.time.Year")
    if kind == "bytes":
        return "bytes"
    named = {"enum": "Enum", "set": "EnumSet", "json": "Json"}.get(kind)
    return connect_named("string", f"io.debezium.data.{named}") if named else "string"


class MySqlAvroEncoder(AvroEncoder):
    """``AvroEncoder`` for MySQL tables: registers each table shape's key and value
    schemas under ``<topic>-key``/``<topic>-value`` the first time it is written (a
    changed shape, e.g. after ``ALTER TABLE``, registers a new version)."""

    def __init__(self, url: str, prefix: str, connector: str,
                 modes: Modes = DEFAULT_MODES) -> None:
        super().__init__(url, prefix, modes.decimal)
        self.modes, self.connector = modes, connector

    def encode(self, table: Any, key: dict[str, Any],
               value: dict[str, Any]) -> tuple[bytes, bytes]:
        """``table`` a MySQL ``Table``; ``key`` and ``value`` the JSON envelope's."""
        return super().encode(table, key, value)

    def _shape(self, table: Any) -> tuple[Any, ...]:
        assert isinstance(table, Table)
        key = (table.db, table.name, table.columns + tuple(map(str, table.types)))
        found = self._shapes.get(key)
        if found is not None:
            return found
        namespace = f"{self.prefix}.{table.db}.{table.name}"
        kinds = {c: avro_type(t, self.modes)
                 for c, t in zip(table.columns, table.types, strict=True)}
        defined: set[str] = set()
        row = {"type": "record", "name": "Value", "namespace": namespace, "fields": [
            {"name": c, "type": defined_once(kinds[c], defined)} if c in table.key else
            {"name": c, "type": ["null", defined_once(kinds[c], defined)], "default": None}
            for c in table.columns]}
        envelope = {"type": "record", "name": "Envelope", "namespace": namespace, "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
            {"name": "source", "type": source_schema(self.connector)},
            {"name": "transaction", "type": ["null", "string"], "default": None},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "ts_us", "type": ["null", "long"], "default": None},
            {"name": "ts_ns", "type": ["null", "long"], "default": None}]}
        key_schema = {"type": "record", "name": "Key", "namespace": namespace,
                      "fields": [{"name": c, "type": kinds[c]} for c in table.key]}
        topic = f"{self.prefix}.{table.db}.{table.name}"
        key_id = self._register(f"{topic}-key", key_schema)
        value_id = self._register(f"{topic}-value", envelope)
        shape = (fastavro.parse_schema(key_schema), key_id, fastavro.parse_schema(envelope),
                 value_id, kinds)
        self._shapes[key] = shape
        return shape
