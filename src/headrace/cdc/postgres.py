"""The database side: checks, catalog lookups, the publication and the snapshot read.

All through psycopg2 on ordinary connections (the replication connection lives in
``connector``). Each function may block on the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.sql as sql

from headrace.cdc.envelope import CatalogColumn, Table
from headrace.cdc.errors import CdcConfigError, CdcError, redact
from headrace.cdc.values import UNKNOWN_TO_DEBEZIUM, TypeCatalog, TypeInfo


def connect(dsn: str, timeout_s: float = 30.0) -> Any:
    """An autocommit connection. ``CdcConfigError`` (the DSN's password redacted) when the
    database can't be reached within ``timeout_s``."""
    try:
        conn = psycopg2.connect(dsn, connect_timeout=max(1, round(timeout_s)))
    except psycopg2.Error as e:
        raise CdcConfigError(f"cannot connect to PostgreSQL ({redact(dsn)}): "
                             f"{_first_line(e)}") from e
    conn.autocommit = True
    return conn


def _first_line(error: Exception) -> str:
    return redact(str(error).strip().splitlines()[0] if str(error).strip() else repr(error))


def type_catalog(conn: Any) -> dict[int, TypeInfo]:
    """The types ``values.converter`` cannot know by oid: enums, domains, ranges, arrays,
    extension types (hstore, ltree, citext...) and the ones Debezium leaves out."""
    with conn.cursor() as cur:
        cur.execute("SELECT t.oid, t.typname, t.typtype, t.typbasetype, t.typtypmod, "
                    "CASE WHEN t.typcategory = 'A' THEN t.typelem ELSE 0 END FROM pg_type t "
                    "WHERE t.typtype <> 'b' OR t.oid >= 16384 OR t.typcategory = 'A' "
                    "OR t.typname = ANY(%s)", (sorted(UNKNOWN_TO_DEBEZIUM),))
        return {int(r[0]): TypeInfo(r[1], r[2], int(r[3]), int(r[4]), int(r[5]))
                for r in cur.fetchall()}


def catalog_columns(conn: Any, schema: str, name: str
                    ) -> tuple[int, str, list[tuple[str, int, int, bool]],
                               dict[str, CatalogColumn]] | None:
    """A table's oid, replica identity (d, f, i, n), columns (name, type, modifier, in the
    replica identity) and NOT NULL/DEFAULT/primary key facts; None if it does not exist."""
    with conn.cursor() as cur:
        cur.execute("SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n ON "
                    "n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
                    "AND c.relkind IN ('r', 'p')", (schema, name))
        found = cur.fetchone()
        if found is None:
            return None
        oid, identity = found
        cur.execute("SELECT a.attname, a.atttypid, a.atttypmod, a.attnotnull, "
                    "pg_get_expr(d.adbin, d.adrelid), "
                    "COALESCE(a.attnum = ANY(pk.indkey), false), "
                    "COALESCE(a.attnum = ANY(ri.indkey), false) FROM pg_attribute a "
                    "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
                    "LEFT JOIN pg_index pk ON pk.indrelid = a.attrelid AND pk.indisprimary "
                    "LEFT JOIN pg_index ri ON ri.indrelid = a.attrelid AND ri.indisreplident "
                    "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped "
                    "ORDER BY a.attnum", (oid,))
        rows = cur.fetchall()
    in_identity = {"d": 5, "i": 6}.get(identity)
    columns = [(r[0], int(r[1]), int(r[2]), bool(in_identity and r[in_identity]))
               for r in rows]
    facts = {r[0]: CatalogColumn(bool(r[3]), r[4], bool(r[5])) for r in rows}
    return int(oid), identity, columns, facts


def check_server(conn: Any) -> str:
    """Refuse what can't work; return the database name."""
    with conn.cursor() as cur:
        cur.execute("SHOW wal_level")
        level = cur.fetchone()[0]
        if level != "logical":
            raise CdcConfigError(f"wal_level is {level!r}: logical replication needs "
                                 "wal_level=logical (postgresql.conf, then restart PostgreSQL)")
        cur.execute("SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cur.fetchone()[0]:
            raise CdcConfigError("the connector's role lacks the REPLICATION attribute "
                                 "(ALTER ROLE ... REPLICATION)")
        cur.execute("SELECT current_database()")
        return str(cur.fetchone()[0])


def table_info(conn: Any, qualified: str, decimal_mode: str, time_mode: str = "adaptive",
               types: TypeCatalog | None = None) -> Table:
    """A table's columns and key from the catalog. ``CdcConfigError`` when it is missing
    or has neither a primary key nor REPLICA IDENTITY FULL."""
    schema, _, name = qualified.rpartition(".")
    schema = schema or "public"
    found = catalog_columns(conn, schema, name)
    if found is None:
        raise CdcConfigError(f"table {schema}.{name} does not exist")
    _oid, identity, columns, facts = found
    if not any(f.primary_key for f in facts.values()) and identity != "f":
        raise CdcConfigError(f"table {schema}.{name} has no primary key: add one, or "
                             "ALTER TABLE ... REPLICA IDENTITY FULL")
    if identity == "f":  # what pgoutput's Relation says: every column is logged
        columns = [(c, oid, mod, True) for c, oid, mod, _ in columns]
    return Table.build(schema, name, columns, facts, identity == "f", decimal_mode,
                       time_mode, types)


def ensure_publication(conn: Any, name: str, tables: list[Table]) -> None:
    """The publication holds exactly the captured tables (created or reset)."""
    names = sql.SQL(", ").join(sql.Identifier(t.schema, t.name) for t in tables)
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,))
        verb = "ALTER PUBLICATION {} SET TABLE {}" if cur.fetchone() else \
            "CREATE PUBLICATION {} FOR TABLE {}"
        cur.execute(sql.SQL(verb).format(sql.Identifier(name), names))


@dataclass(frozen=True)
class SlotState:
    exists: bool
    confirmed_flush_lsn: str | None = None
    wal_status: str | None = None
    retained_bytes: int | None = None
    """WAL the server keeps for the slot (from its restart LSN to the server's end)."""
    lag_bytes: int | None = None
    """WAL written since the slot's confirmed position."""
    current_lsn: str | None = None
    active: bool = False
    """A connector is streaming from the slot now."""
    flush_lag_s: float | None = None
    """The server's measure of how late the connector confirms (``pg_stat_replication``'s
    ``flush_lag``); None when idle and caught up, or not connected."""


def slot_state(conn: Any, slot: str) -> SlotState:
    with conn.cursor() as cur:
        cur.execute("SELECT s.confirmed_flush_lsn::text, s.wal_status, "
                    "pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint, "
                    "pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint, "
                    "pg_current_wal_lsn()::text, s.active, "
                    "extract(epoch FROM r.flush_lag)::float8 "
                    "FROM pg_replication_slots s LEFT JOIN pg_stat_replication r "
                    "ON r.pid = s.active_pid WHERE s.slot_name = %s", (slot,))
        row = cur.fetchone()
    if row is None:
        return SlotState(False)
    return SlotState(True, row[0], row[1], row[2], row[3], row[4], bool(row[5]), row[6])


def drop_slot(conn: Any, slot: str) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot(%s) FROM pg_replication_slots "
                    "WHERE slot_name = %s", (slot, slot))


def emit_heartbeat(conn: Any) -> None:
    """A WAL record every connector sees (a non-transactional logical message), so the
    slot can advance while the captured tables are idle."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_logical_emit_message(false, 'headrace-heartbeat', '')")


def read_snapshot(dsn: str, snapshot_name: str, tables: list[Table], batch: int = 2000
                  ) -> Iterator[tuple[Table, tuple[str | None, ...]] | int]:
    """First the snapshot transaction's id (Debezium's snapshot ``txId``), then every row
    of ``tables`` as of the exported snapshot, table by table, each value as its type's
    output function prints it (as pgoutput sends values: no ``::text``, which would
    strip a char(n)'s padding). Blocks on the database."""
    conn = psycopg2.connect(dsn)
    try:
        conn.set_session(isolation_level=psycopg2.extensions.ISOLATION_LEVEL_REPEATABLE_READ,
                         readonly=True)
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
            cur.execute("SELECT txid_current(), array_agg(oid) FROM pg_type")
            tx_id, oids = cur.fetchone()
        raw = psycopg2.extensions.new_type(tuple(oids), "HEADRACE_RAW", lambda v, _cur: v)
        psycopg2.extensions.register_type(raw, conn)
        yield int(tx_id)
        for table in tables:
            columns = sql.SQL(", ").join(sql.Identifier(c) for c in table.columns)
            with conn.cursor(name=f"snapshot_{table.name}") as cur:
                cur.itersize = batch
                cur.execute(sql.SQL("SELECT {} FROM {}").format(
                    columns, sql.Identifier(table.schema, table.name)))
                for row in cur:
                    yield table, tuple(row)
        conn.commit()
    except psycopg2.Error as e:
        raise CdcError(f"snapshot read failed: {_first_line(e)}") from e
    finally:
        conn.close()
