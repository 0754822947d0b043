"""Debezium's MySQL change-event envelope (JSON converter, no schemas).

Key: ``{"<pk column>": value, ...}``. Value: ``{"before", "after", "source", "op",
"ts_ms", "ts_us", "ts_ns", "transaction"}``; the binlog holds full row images
(``binlog_row_image=FULL``), so ``before`` is the whole old row for updates and deletes.
A delete is followed by a tombstone (same key, null value); an update that changes the
key is a delete (and its tombstone) of the old key and a create of the new, as Debezium.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headrace import __version__ as headrace_version
from headrace.cdc.kafka_log import Record
from headrace.cdc.mysql import Table
from headrace.cdc.mysql_values import DEFAULT_MODES, Modes, convert

Encode = Callable[[Table, dict[str, Any], dict[str, Any]], tuple[bytes, bytes]]
"""Key and value to bytes in another format than JSON (``MySqlAvroEncoder.encode``)."""


@dataclass(frozen=True)
class Source:
    """Where a change comes from (Debezium's MySQL ``source`` block)."""

    name: str
    ts_ms: int
    server_id: int
    file: str
    pos: int
    snapshot: str = "false"
    gtid: str | None = None
    row: int = 0
    thread: int | None = None
    connector: str = "mysql"

    def block(self, table: Table) -> dict[str, Any]:
        return {"version": headrace_version, "connector": self.connector, "name": self.name,
                "ts_ms": self.ts_ms, "snapshot": self.snapshot, "db": table.db,
                "sequence": None, "ts_us": self.ts_ms * 1000, "ts_ns": self.ts_ms * 1_000_000,
                "table": table.name, "server_id": self.server_id, "gtid": self.gtid,
                "file": self.file, "pos": self.pos, "row": self.row, "thread": self.thread,
                "query": None}


def topic_of(prefix: str, table: Table) -> str:
    return f"{prefix}.{table.db}.{table.name}"


def row(table: Table, values: dict[str, Any] | tuple[Any, ...],
        none_sources: dict[str, str] | None = None, modes: Modes = DEFAULT_MODES
        ) -> dict[str, Any]:
    """Debezium's JSON row from column values by name (binlog) or in column order
    (snapshot). ``none_sources``: why a binlog value is None (the binlog reader gives an
    empty SET as None; it is "" to Debezium)."""
    if isinstance(values, tuple):
        return {c: convert(t, v, modes) for c, t, v in zip(table.columns, table.types,
                                                            values, strict=True)}
    empty = {c for c, why in (none_sources or {}).items() if why == "empty set"}
    return {c: "" if c in empty else convert(t, values.get(c), modes)
            for c, t in zip(table.columns, table.types, strict=True)}


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def records(prefix: str, table: Table, op: str, before: dict[str, Any] | None,
            after: dict[str, Any] | None, source: Source,
            encode: Encode | None = None) -> list[Record]:
    """The Kafka records of one row change: one, or three for a key-changing update
    (delete, tombstone, create), or two for a delete (the event and its tombstone).
    JSON unless ``encode`` is given."""
    topic = topic_of(prefix, table)
    if op == "u" and before is not None and after is not None and \
            any(before[k] != after[k] for k in table.key):
        return [*records(prefix, table, "d", before, None, source, encode),
                *records(prefix, table, "c", None, after, source, encode)]
    doc = after if after is not None else before
    assert doc is not None
    key_doc = {k: doc[k] for k in table.key}
    now_us = time.time_ns() // 1000
    value = {"before": before, "after": after, "source": source.block(table),
             "transaction": None, "op": op, "ts_ms": now_us // 1000, "ts_us": now_us,
             "ts_ns": now_us * 1000}
    if encode is not None:
        key, encoded = encode(table, key_doc, value)
    else:
        key, encoded = _dumps(key_doc), _dumps(value)
    out: list[Record] = [(topic, key, encoded)]
    if op == "d":
        out.append((topic, key, None))
    return out
