"""Change events as Avro through a schema registry (Confluent's wire format), the way
Debezium's PostgreSQL connector writes them with Confluent's ``AvroConverter``.

Per table, a key record (the primary key columns) and a value record ``Envelope``
(``before``/``after`` of the table's ``Value`` record, ``source``, ``op``, ``ts_ms``,
``transaction``) are derived from the columns and registered under ``<topic>-key`` and
``<topic>-value`` (TopicNameStrategy) the first time a table shape is written; a column
added later registers a new version (new columns are optional, so it is backward
compatible). Types as Debezium's Avro: int2/int4 int, int8 long, float4 float, float8
double, boolean, numeric bytes (``precise``: the unscaled value, with Kafka Connect's
``Decimal`` name and scale) or string/double by ``--decimal-handling``, date int, time and
timestamp long, timestamptz and timetz string, bytea bytes, arrays of their element,
everything else string. Non-key columns are optional.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import fastavro
import httpx

from headrace.cdc.envelope import UNAVAILABLE, Table
from headrace.cdc.errors import CdcError
from headrace.cdc.values import (
    ARRAYS,
    BOOL,
    BYTEA,
    DATE,
    FLOAT4,
    FLOAT8,
    INT2,
    INT4,
    INT8,
    NUMERIC,
    OID,
    TIME,
    TIMESTAMP,
)

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


def _avro_type(oid: int, modifier: int, decimal_mode: str) -> Any:
    if oid in ARRAYS:
        return {"type": "array", "items": ["null", _avro_type(ARRAYS[oid], modifier,
                                                               decimal_mode)]}
    simple = {BOOL: "boolean", INT2: "int", INT4: "int", INT8: "long", OID: "long",
              FLOAT4: "float", FLOAT8: "double", DATE: "int", TIME: "long",
              TIMESTAMP: "long", BYTEA: "bytes"}
    if oid in simple:
        return simple[oid]
    if oid == NUMERIC:
        if decimal_mode == "double":
            return "double"
        if decimal_mode == "precise" and modifier >= 4:
            return {"type": "bytes", "connect.name": "org.apache.kafka.connect.data.Decimal",
                    "connect.parameters": {"scale": str((modifier - 4) & 0xFFFF)}}
    return "string"


class AvroEncoder:
    """Registers each table shape's schemas at the registry ``url`` and encodes events.
    Not thread-safe (the connector's one thread). Registration blocks on HTTP."""

    def __init__(self, url: str, prefix: str, decimal_mode: str) -> None:
        self.url, self.prefix, self.decimal_mode = url.rstrip("/"), prefix, decimal_mode
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
        kinds = {c: _avro_type(oid, mod, self.decimal_mode)
                 for c, (oid, mod), f in zip(table.columns, table.types, table.converters,
                                             strict=True) if f is not None}
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
        key_schema = {"type": "record", "name": "Key", "namespace": namespace,
                      "fields": [{"name": c, "type": kinds[c]} for c in table.key]}
        topic = f"{self.prefix}.{table.schema}.{table.name}"
        key_id = self._register(f"{topic}-key", key_schema)
        value_id = self._register(f"{topic}-value", envelope)
        binary = {c for c, k in kinds.items() if k == "bytes" or
                  (isinstance(k, dict) and k.get("type") == "bytes")}
        shape = (fastavro.parse_schema(key_schema), key_id, fastavro.parse_schema(envelope),
                 value_id, binary, kinds)
        self._shapes[key] = shape
        return shape

    def encode(self, table: Table, key: dict[str, Any],
               value: dict[str, Any]) -> tuple[bytes, bytes]:
        key_schema, key_id, value_schema, value_id, binary, kinds = self._shape(table)
        for side in ("before", "after"):
            if value[side] is not None:
                value[side] = {c: _avro_value(v, c in binary, kinds[c])
                               for c, v in value[side].items()}
        key = {c: _avro_value(v, c in binary, kinds[c]) for c, v in key.items()}
        return _frame(key_schema, key_id, key), _frame(value_schema, value_id, value)


def _avro_value(value: Any, binary: bool, kind: Any) -> Any:
    """JSON-mode values in Avro's terms: base64 back to bytes, NaN/Infinity as floats,
    the unavailable-TOAST placeholder as bytes or (non-string types) null."""
    if value is None:
        return None
    if value == UNAVAILABLE:
        return UNAVAILABLE.encode() if binary else (value if kind == "string" else None)
    if binary:
        return base64.b64decode(value)
    if kind in ("float", "double") and isinstance(value, str):
        return float(value)
    return value


def _frame(schema: Any, schema_id: int, doc: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(out, schema, doc)
    return out.getvalue()
