"""Debezium's change-event envelope, built from pgoutput rows (JSON, without schemas).

Key: ``{"<primary key column>": value, ...}``. Value: ``{"before", "after", "source",
"op", "ts_ms", "transaction"}`` with ``op`` c (insert), u (update), d (delete), r (snapshot
read). ``before`` is the full old row only when the table has REPLICA IDENTITY FULL;
else, for a delete, the replica identity's columns (the primary key, or the index of
USING INDEX) with the other columns null when nullable and their type's zero (or their
constant DEFAULT) when NOT NULL, and null for an update, as Debezium. An update that
changes the primary key is a delete and a create. An unchanged TOASTed column (not sent
by PostgreSQL) is the placeholder ``__debezium_unavailable_value`` (for bytea: base64 of
its bytes; for arrays: a one-element array of it). A delete is followed by a tombstone
(same key, null value) so compacted topics drop the key.

The functions here are the database-independent part: ``records``, ``Source.block`` and
the encoders serve any connector whose rows are dicts of Debezium values.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from headrace import __version__ as headrace_version
from headrace.cdc.pgoutput import UNCHANGED_TOAST, Relation, Value
from headrace.cdc.values import (
    DATE,
    SNAPSHOT_DATE_INFINITY,
    UNAVAILABLE,
    Converter,
    TypeCatalog,
    converter,
    default_literal,
    type_default,
    unavailable,
)

__all__ = ["UNAVAILABLE", "CatalogColumn", "Source", "Table", "records", "topic_of"]



@dataclass(frozen=True)
class CatalogColumn:
    """What the catalog adds to a pgoutput Relation column."""

    not_null: bool = False
    default: str | None = None  # the DEFAULT expression (pg_get_expr)
    primary_key: bool = False


@dataclass
class Table:
    """A captured table's shape (from a Relation message or the catalog at snapshot)."""

    schema: str
    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    full_identity: bool
    converters: tuple[Converter | None, ...] = field(repr=False)
    """None: a column of a type Debezium leaves out (not in the events)."""
    types: tuple[tuple[int, int], ...] = ()
    """Each column's (type oid, type modifier): what an Avro schema is derived from."""
    defaults: tuple[Any, ...] = ()
    """Per column, what ``before`` holds when the WAL does not carry it: the constant
    DEFAULT or the type's zero for NOT NULL columns, None for nullable ones."""
    identity: tuple[str, ...] = ()
    """The replica identity's columns (what PostgreSQL logs of an old row), if not FULL."""
    catalog: TypeCatalog | None = field(default=None, repr=False)

    @classmethod
    def build(cls, schema: str, name: str, columns: Sequence[tuple[str, int, int, bool]],
              catalog: dict[str, CatalogColumn], full_identity: bool, decimal_mode: str,
              time_mode: str = "adaptive", types: TypeCatalog | None = None) -> Table:
        """``columns``: (name, type oid, type modifier, in the replica identity)."""
        converters = tuple(converter(oid, mod, decimal_mode, time_mode, types)
                           for _, oid, mod, _ in columns)
        defaults = []
        for (column, oid, mod, _), convert in zip(columns, converters, strict=True):
            info = catalog.get(column, CatalogColumn())
            literal = default_literal(info.default)
            value = None
            if info.not_null and convert is not None:
                value = (convert(literal) if literal is not None
                         else type_default(convert, oid, mod, types))
            defaults.append(value)
        key = tuple(c for c, *_ in columns if catalog.get(c, CatalogColumn()).primary_key)
        identity = tuple(c for c, _, _, is_key in columns if is_key)
        return cls(schema, name, tuple(c for c, *_ in columns), key or identity,
                   full_identity, converters, tuple((oid, mod) for _, oid, mod, _ in columns),
                   tuple(defaults), identity, types)

    @classmethod
    def from_relation(cls, rel: Relation, decimal_mode: str, time_mode: str = "adaptive",
                      types: TypeCatalog | None = None,
                      catalog: dict[str, CatalogColumn] | None = None) -> Table:
        return cls.build(rel.namespace, rel.name,
                         [(c.name, c.type_oid, c.type_modifier, c.is_key) for c in rel.columns],
                         catalog or {}, rel.replica_identity == "f", decimal_mode, time_mode,
                         types)

    @property
    def visible(self) -> tuple[str, ...]:
        """The columns the events carry."""
        return tuple(c for c, f in zip(self.columns, self.converters, strict=True)
                     if f is not None)

    def row(self, values: Sequence[Value], snapshot: bool = False) -> dict[str, Any]:
        """The event row of one tuple. ``snapshot``: read by the snapshot (Debezium reads
        those through JDBC, which gives a few values differently)."""
        out: dict[str, Any] = {}
        for name, convert, value, (oid, _mod) in zip(self.columns, self.converters, values,
                                                     self.types, strict=True):
            if convert is None:
                continue
            if value is None:
                out[name] = None
            elif value is UNCHANGED_TOAST:
                out[name] = unavailable(oid, self.catalog)
            else:
                assert isinstance(value, str)
                out[name] = convert(value)
                if snapshot:
                    out[name] = _as_snapshot(oid, value, out[name])
        return out

    def old_row(self, values: Sequence[Value]) -> dict[str, Any]:
        """An old row of which only the replica identity's columns are known."""
        row = self.row(values)
        for name, default in zip(self.columns, self.defaults, strict=True):
            if name in row and name not in self.identity and row[name] is None:
                row[name] = default
        return row


def _as_snapshot(oid: int, text: str, value: Any) -> Any:
    if oid == DATE and text in SNAPSHOT_DATE_INFINITY:
        return SNAPSHOT_DATE_INFINITY[text]
    return value


@dataclass(frozen=True)
class Source:
    """Where a change comes from (Debezium's ``source`` block)."""

    name: str
    db: str
    lsn: int
    tx_id: int | None
    ts_us: int
    snapshot: str = "false"
    """"false", or in a snapshot: "first", "first_in_data_collection", "true",
    "last_in_data_collection", "last" (Debezium's markers)."""
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
    key_doc = {k: row.get(k) for k in table.key if k in row}
    now_us = time.time_ns() // 1000
    value = {"before": before, "after": after, "source": source.block(table),
             "transaction": None, "op": op, "ts_ms": now_us // 1000, "ts_us": now_us,
             "ts_ns": now_us * 1000}
    key, encoded = encoder.encode(table, key_doc, value)
    out: list[tuple[bytes, bytes | None]] = [(key, encoded)]
    if op == "d":
        out.append((key, None))
    return out


def snapshot_markers(counts: Sequence[int]) -> list[list[str]]:
    """Debezium's ``source.snapshot`` of each row of a snapshot of tables with ``counts``
    rows each: the very first row "first", the very last "last", a table's first and last
    rows "first_in_data_collection" and "last_in_data_collection", the others "true"."""
    total = sum(counts)
    out: list[list[str]] = []
    seen = 0
    for count in counts:
        marks = []
        for i in range(count):
            mark = "true"
            if seen == total - 1:
                mark = "last"
            elif seen == 0:
                mark = "first"
            elif i == count - 1:
                mark = "last_in_data_collection"
            elif i == 0:
                mark = "first_in_data_collection"
            marks.append(mark)
            seen += 1
        out.append(marks)
    return out

