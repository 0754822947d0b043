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

from headrace.cdc.envelope import Table
from headrace.cdc.errors import CdcConfigError, CdcError
from headrace.cdc.values import converter


def connect(dsn: str) -> Any:
    """An autocommit connection. ``CdcConfigError`` when the database can't be reached."""
    try:
        conn = psycopg2.connect(dsn)
    except psycopg2.Error as e:
        raise CdcConfigError(f"cannot connect to PostgreSQL ({dsn}): {str(e).strip()}") from e
    conn.autocommit = True
    return conn


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


def table_info(conn: Any, qualified: str, decimal_mode: str) -> Table:
    """A table's columns and key from the catalog. ``CdcConfigError`` when it is missing
    or has neither a primary key nor REPLICA IDENTITY FULL."""
    schema, _, name = qualified.rpartition(".")
    schema = schema or "public"
    with conn.cursor() as cur:
        cur.execute("SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n ON "
                    "n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
                    "AND c.relkind IN ('r', 'p')", (schema, name))
        found = cur.fetchone()
        if found is None:
            raise CdcConfigError(f"table {schema}.{name} does not exist")
        oid, identity = found
        cur.execute("SELECT a.attname, a.atttypid, a.atttypmod, "
                    "COALESCE(a.attnum = ANY(i.indkey), false) FROM pg_attribute a "
                    "LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary "
                    "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped "
                    "ORDER BY a.attnum", (oid,))
        columns = cur.fetchall()
    key = tuple(c[0] for c in columns if c[3])
    if not key and identity != "f":
        raise CdcConfigError(f"table {schema}.{name} has no primary key: add one, or "
                             "ALTER TABLE ... REPLICA IDENTITY FULL")
    return Table(schema, name, tuple(c[0] for c in columns), key or tuple(c[0] for c in columns),
                 identity == "f", tuple(converter(c[1], c[2], decimal_mode) for c in columns),
                 tuple((c[1], c[2]) for c in columns))


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


def slot_state(conn: Any, slot: str) -> SlotState:
    with conn.cursor() as cur:
        cur.execute("SELECT confirmed_flush_lsn::text, wal_status, "
                    "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                    "FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
    if row is None:
        return SlotState(False)
    return SlotState(True, row[0], row[1], row[2])


def drop_slot(conn: Any, slot: str) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot(%s) FROM pg_replication_slots "
                    "WHERE slot_name = %s", (slot, slot))


def emit_heartbeat(conn: Any) -> None:
    """A WAL record every connector sees (a non-transactional logical message), so the
    slot can advance while the captured tables are idle."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_logical_emit_message(false, 'headrace-heartbeat', '')")


def read_snapshot(dsn: str, snapshot_name: str, tables: list[Table],
                  batch: int = 2000) -> Iterator[tuple[Table, tuple[str | None, ...]]]:
    """Every row of ``tables`` as of the exported snapshot, in text format (as pgoutput
    sends values), table by table. Blocks on the database."""
    conn = psycopg2.connect(dsn)
    try:
        conn.set_session(isolation_level=psycopg2.extensions.ISOLATION_LEVEL_REPEATABLE_READ,
                         readonly=True)
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
        for table in tables:
            columns = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c))
                                         for c in table.columns)
            with conn.cursor(name=f"snapshot_{table.name}") as cur:
                cur.itersize = batch
                cur.execute(sql.SQL("SELECT {} FROM {}").format(
                    columns, sql.Identifier(table.schema, table.name)))
                for row in cur:
                    yield table, tuple(row)
        conn.commit()
    except psycopg2.Error as e:
        raise CdcError(f"snapshot read failed: {str(e).strip()}") from e
    finally:
        conn.close()
