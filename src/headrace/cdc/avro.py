"""Change events as Avro through a schema registry (Confluent's wire format), the way
Debezium's PostgreSQL connector writes them with Confluent's ``AvroConverter``.

Per table, a key record (the primary key columns) and a value record ``Envelope``
(``before``/``after`` of the table's ``Value`` record, ``source``, ``op``, ``ts_ms``,
``transaction``) are derived from the columns and registered under ``<topic>-key`` and
``<topic>-value`` (TopicNameStrategy) the first time a table shape is written; a column
added later registers a new version (new columns are optional, so it is backward
compatible). Types follow Debezium's Connect schemas (``_avro_type``): int2/int4 int,
int8/oid long, float4 float, float8 double, boolean, numeric(p,s)/money bytes (Kafka
Connect's ``Decimal``), plain numeric Debezium's ``VariableScaleDecimal`` record (string
or double by ``--decimal-handling-mode``), date and millisecond time int, microsecond
time, timestamps and interval long, timestamptz and timetz string, bytea and bit strings
bytes, point Debezium's ``Point`` record, arrays of their element, everything else
string. Non-key columns are optional.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import fastavro
import httpx

from headrace.cdc.envelope import Table
from headrace.cdc.errors import CdcError
from headrace.cdc.values import (
    ARRAYS,
    BIT,
    BOOL,
    BYTEA,
    DATE,
    FLOAT4,
    FLOAT8,
    INT2,
    INT4,
    INT8,
    INTERVAL,
    MONEY,
    NUMERIC,
    OID,
    POINT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    TIMETZ,
    UUID,
    VARBIT,
    TypeCatalog,
)

JSON, JSONB, XML, TSVECTOR = 114, 3802, 142, 3614

SOURCE = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
          "fields": [
              {"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
              {"name": "name", "type": "string"}, {"name": "ts_ms", "type": "long"},
              {"name": "snapshot", "type": ["null", "string"], "default": None},
              {"name": "db", "type": "string"},
              {"name": "sequence", "type": ["null", "string"], "default": None},
              {"name": "schema", "type": "string"}, {"name": "table", "type": "string"},
              {"name": "txId", "type": ["null", "long"], "default": None},
              {"name": "ts_us", "type": ["null", "long"], "default": None},
              {"name": "ts_ns", "type": ["null", "long"], "default": None},
              {"name": "lsn", "type": ["null", "long"], "default": None},
              {"name": "xmin", "type": ["null", "long"], "default": None},
              {"name": "origin", "type": ["null", "string"], "default": None},
              {"name": "origin_lsn", "type": ["null", "long"], "default": None}]}


def connect_named(kind: str, name: str, **extra: Any) -> dict[str, Any]:
    """Avro type ``kind`` carrying Kafka Connect's logical type ``name`` (and ``extra``)."""
    return {"type": kind, "connect.name": name, **extra}


def _avro_type(oid: int, modifier: int, decimal_mode: str, time_mode: str = "adaptive",
               types: TypeCatalog | None = None) -> Any:
    """The Avro type of a column as Confluent's AvroConverter writes Debezium's Connect
    schema for it (semantic types named by ``connect.name``)."""
    info = (types or {}).get(oid)
    if info is not None and info.kind == "d":
        return _avro_type(info.base, info.base_modifier if modifier < 0 else modifier,
                          decimal_mode, time_mode, types)
    element = ARRAYS.get(oid) or (info.element if info is not None else 0)
    if element:
        return {"type": "array", "items": ["null", _avro_type(element, modifier, decimal_mode,
                                                               time_mode, types)]}
    if info is not None:
        named = {"hstore": "Json", "ltree": "Ltree"}.get(info.name)
        if info.kind == "e":
            named = "Enum"
        return connect_named("string", f"io.debezium.data.{named}") if named else "string"
    strings = {UUID: "Uuid", JSON: "Json", JSONB: "Json", XML: "Xml", TSVECTOR: "Tsvector"}
    if oid in strings:
        return connect_named("string", f"io.debezium.data.{strings[oid]}")
    simple = {BOOL: "boolean", INT2: "int", INT4: "int", INT8: "long", OID: "long",
              FLOAT4: "float", FLOAT8: "double", BYTEA: "bytes"}
    if oid in simple:
        return simple[oid]
    if oid in (NUMERIC, MONEY):
        scale = 2 if oid == MONEY else (modifier - 4) & 0xFFFF if modifier >= 4 else None
        if decimal_mode == "double":
            return "double"
        if decimal_mode == "string":
            return "string"
        if scale is None:
            return {"type": "record", "name": "VariableScaleDecimal",
                    "namespace": "io.debezium.data",
                    "connect.name": "io.debezium.data.VariableScaleDecimal",
                    "fields": [{"name": "scale", "type": "int"},
                               {"name": "value", "type": "bytes"}]}
        return connect_named("bytes", "org.apache.kafka.connect.data.Decimal",
                      **{"connect.parameters": {"scale": str(scale)}})
    millis = time_mode == "connect" or 0 <= modifier <= 3
    if oid == DATE:
        return connect_named("int", "io.debezium.time.Date")
    if oid == TIME:
        return connect_named("int", "io.debezium.time.Time") if millis else \
            connect_named("long", "io.debezium.time.MicroTime")
    if oid == TIMESTAMP:
        return connect_named("long", "io.debezium.time.Timestamp") if millis else \
            connect_named("long", "io.debezium.time.MicroTimestamp")
    if oid == TIMESTAMPTZ:
        return connect_named("string", "io.debezium.time.ZonedTimestamp")
    if oid == TIMETZ:
        return connect_named("string", "io.debezium.time.ZonedTime")
    if oid == INTERVAL:
        return connect_named("long", "io.debezium.time.MicroDuration")
    if oid == BIT and modifier == 1:
        return "boolean"
    if oid in (BIT, VARBIT):
        return connect_named("bytes", "io.debezium.data.Bits")
    if oid == POINT:
        return {"type": "record", "name": "Point", "namespace": "io.debezium.data.geometry",
                "connect.name": "io.debezium.data.geometry.Point",
                "fields": [{"name": "x", "type": "double"}, {"name": "y", "type": "double"},
                           {"name": "wkb", "type": ["null", "bytes"], "default": None},
                           {"name": "srid", "type": ["null", "int"], "default": None}]}
    return "string"


class AvroEncoder:
    """Registers each table shape's schemas at the registry ``url`` and encodes events.
    Not thread-safe (the connector's one thread). Registration blocks on HTTP."""

    def __init__(self, url: str, prefix: str, decimal_mode: str,
                 time_mode: str = "adaptive") -> None:
        self.url, self.prefix, self.decimal_mode = url.rstrip("/"), prefix, decimal_mode
        self.time_mode = time_mode
        self._shapes: dict[tuple[str, str, tuple[Any, ...]], tuple[Any, ...]] = {}

    def _register(self, subject: str, schema: dict[str, Any]) -> int:
        try:
            answer = httpx.post(f"{self.url}/subjects/{subject}/versions",
                                json={"schema": json.dumps(schema)}, timeout=30)
        except httpx.HTTPError as e:
            raise CdcError(f"schema registry {self.url} unreachable: {e}") from e
        if answer.status_code >= 400:
            raise CdcError(f"schema registry refused {subject}: {answer.text[:500]}")
        return int(answer.json()["id"])

    def _shape(self, table: Table) -> tuple[Any, ...]:
        key = (table.schema, table.name, table.columns + tuple(map(str, table.types)))
        found = self._shapes.get(key)
        if found is not None:
            return found
        namespace = f"{self.prefix}.{table.schema}.{table.name}"
        kinds = {c: _avro_type(oid, mod, self.decimal_mode, self.time_mode, table.catalog)
                 for c, (oid, mod), f in zip(table.columns, table.types, table.converters,
                                             strict=True) if f is not None}
        key_kinds = dict(kinds)  # the key schema defines its own named types
        defined: set[str] = set()
        kinds = {c: defined_once(k, defined) for c, k in kinds.items()}
        value_fields = [{"name": c, "type": kinds[c]} if c in table.key and not
                        table.full_identity else
                        {"name": c, "type": ["null", kinds[c]], "default": None}
                        for c in table.visible]
        row = {"type": "record", "name": "Value", "namespace": namespace,
               "fields": value_fields}
        envelope = {"type": "record", "name": "Envelope", "namespace": namespace, "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
            {"name": "source", "type": SOURCE}, {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "ts_us", "type": ["null", "long"], "default": None},
            {"name": "ts_ns", "type": ["null", "long"], "default": None},
            {"name": "transaction", "type": ["null", "string"], "default": None}]}
        key_defined: set[str] = set()
        key_schema = {"type": "record", "name": "Key", "namespace": namespace,
                      "fields": [{"name": c, "type": defined_once(key_kinds[c], key_defined)}
                                 for c in table.key]}
        topic = f"{self.prefix}.{table.schema}.{table.name}"
        key_id = self._register(f"{topic}-key", key_schema)
        value_id = self._register(f"{topic}-value", envelope)
        shape = (fastavro.parse_schema(key_schema), key_id, fastavro.parse_schema(envelope),
                 value_id, kinds)
        self._shapes[key] = shape
        return shape

    def encode(self, table: Table, key: dict[str, Any],
               value: dict[str, Any]) -> tuple[bytes, bytes]:
        key_schema, key_id, value_schema, value_id, kinds = self._shape(table)
        for side in ("before", "after"):
            if value[side] is not None:
                value[side] = {c: _avro_value(v, kinds[c]) for c, v in value[side].items()}
        key = {c: _avro_value(v, kinds[c]) for c, v in key.items()}
        return _frame(key_schema, key_id, key), _frame(value_schema, value_id, value)


def defined_once(kind: Any, defined: set[str]) -> Any:
    """``kind`` with each named record after its first definition in a schema replaced
    by its full name (Avro allows one definition per name)."""
    if isinstance(kind, dict) and kind.get("type") == "record":
        full = f"{kind['namespace']}.{kind['name']}"
        if full in defined:
            return full
        defined.add(full)
        return kind
    if isinstance(kind, dict) and kind.get("type") == "array":
        return {**kind, "items": ["null", defined_once(kind["items"][1], defined)]}
    return kind


def _avro_value(value: Any, kind: Any) -> Any:
    """A JSON-mode value in Avro's terms: base64 back to bytes (also inside Debezium's
    records), NaN/Infinity as floats; a value the type cannot hold (the unavailable-TOAST
    placeholder in a non-string column) as null."""
    if value is None:
        return None
    base = kind.get("type") if isinstance(kind, dict) else kind
    try:
        if base == "array":
            if not isinstance(value, list):
                return None
            element = kind["items"][1]
            return [_avro_value(v, element) for v in value]
        if base == "record" or (isinstance(kind, str) and "." in kind):  # a named record
            out = dict(value)
            for field in ("value", "wkb"):
                if isinstance(out.get(field), str):
                    out[field] = base64.b64decode(out[field])
            return out
        if base == "bytes":
            return base64.b64decode(value)
        if base in ("float", "double") and isinstance(value, str):
            return float(value)
        if base in ("int", "long", "boolean") and isinstance(value, str):
            return None
    except (ValueError, TypeError, AttributeError):
        return None
    return value


def _frame(schema: Any, schema_id: int, doc: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(out, schema, doc)
    return out.getvalue()
