"""Debezium's change-event envelope, built from pgoutput rows (JSON, without schemas).

Key: ``{"<pk column>": value, ...}``. Value: ``{"before", "after", "source", "op",
"ts_ms", "transaction"}`` with ``op`` c (insert), u (update), d (delete), r (snapshot read).
``before`` is the full old row only when the table has REPLICA IDENTITY FULL; else, for a
delete, the key columns with the other columns null, and null for an update (as
Debezium). An unchanged TOASTed column (not sent by PostgreSQL) is the placeholder
``__debezium_unavailable_value``. A delete is followed by a tombstone (same key, null
value) so compacted topics drop the key.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from headrace import __version__ as headrace_version
from headrace.cdc.pgoutput import UNCHANGED_TOAST, Relation, Value
from headrace.cdc.values import converter

UNAVAILABLE = "__debezium_unavailable_value"


@dataclass
class Table:
    """A captured table's shape (from a Relation message or the catalog at snapshot)."""

    schema: str
    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    full_identity: bool
    converters: tuple[Callable[[str], Any], ...] = field(repr=False)
    types: tuple[tuple[int, int], ...] = ()
    """Each column's (type oid, type modifier): what an Avro schema is derived from."""

    @classmethod
    def from_relation(cls, rel: Relation, decimal_mode: str) -> Table:
        return cls(rel.namespace, rel.name, tuple(c.name for c in rel.columns),
                   tuple(c.name for c in rel.columns if c.is_key), rel.replica_identity == "f",
                   tuple(converter(c.type_oid, c.type_modifier, decimal_mode)
                         for c in rel.columns),
                   tuple((c.type_oid, c.type_modifier) for c in rel.columns))

    def row(self, values: Sequence[Value]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, convert, value in zip(self.columns, self.converters, values, strict=True):
            if value is None:
                out[name] = None
            elif value is UNCHANGED_TOAST:
                out[name] = UNAVAILABLE
            else:
                assert isinstance(value, str)
                out[name] = convert(value)
        return out


@dataclass(frozen=True)
class Source:
    """Where a change comes from (Debezium's ``source`` block)."""

    name: str
    db: str
    lsn: int
    tx_id: int | None
    ts_us: int
    snapshot: str = "false"  # "true", "last", "false"
    last_commit_lsn: int | None = None

    def block(self, table: Table) -> dict[str, Any]:
        last = None if self.last_commit_lsn is None else str(self.last_commit_lsn)
        return {"version": headrace_version, "connector": "postgresql", "name": self.name,
                "ts_ms": self.ts_us // 1000, "snapshot": self.snapshot, "db": self.db,
                "sequence": json.dumps([last, str(self.lsn)], separators=(",", ":")),
                "ts_us": self.ts_us, "ts_ns": self.ts_us * 1000, "schema": table.schema,
                "table": table.name, "txId": self.tx_id, "lsn": self.lsn, "xmin": None,
                "origin": None, "origin_lsn": None}


def topic_of(prefix: str, table: Table) -> str:
    return f"{prefix}.{table.schema}.{table.name}"


class Encoder(Protocol):
    """Turns an event's key and value documents into record bytes."""

    def encode(self, table: Table, key: dict[str, Any],
               value: dict[str, Any]) -> tuple[bytes, bytes]: ...


class JsonEncoder:
    """Debezium's JsonConverter with ``schemas.enable=false``."""

    def encode(self, table: Table, key: dict[str, Any],
               value: dict[str, Any]) -> tuple[bytes, bytes]:
        return (json.dumps(key, separators=(",", ":")).encode(),
                json.dumps(value, separators=(",", ":")).encode())


JSON = JsonEncoder()


def records(table: Table, op: str, before: dict[str, Any] | None,
            after: dict[str, Any] | None, source: Source, encoder: Encoder = JSON
            ) -> list[tuple[bytes, bytes | None]]:
    """The Kafka records (key, value) of one change: one, or two for a delete."""
    row = after if after is not None else before
    assert row is not None
    key_doc = {k: row.get(k) for k in table.key}
    now_us = time.time_ns() // 1000
    value = {"before": before, "after": after, "source": source.block(table),
             "transaction": None, "op": op, "ts_ms": now_us // 1000, "ts_us": now_us,
             "ts_ns": now_us * 1000}
    key, encoded = encoder.encode(table, key_doc, value)
    out: list[tuple[bytes, bytes | None]] = [(key, encoded)]
    if op == "d":
        out.append((key, None))
    return out


def key_only(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """An old row of which only the key columns are known (default replica identity)."""
    return {c: (values.get(c) if c in table.key else None) for c in table.columns}

