"""Reading the binlog (python-mysql-replication) into source transactions and writing the
committed ones, each whole and with the position after it, in Kafka transactions.

Transaction boundaries: a transaction starts at its GTID event (MariaDB; MySQL's GTID
event is followed by a ``BEGIN`` query) or a ``BEGIN`` query, and ends at its XID event
(InnoDB) or a ``COMMIT`` query (non-transactional engines). A DDL statement is a
transaction of its own with no row changes: only the position moves past it.

Committed source transactions go out as in the PostgreSQL connector: a burst shares one
Kafka transaction (up to ``_MAX_PENDING`` records or ``_MAX_PENDING_S``), never splits
one; whatever is pending goes out as soon as the binlog pauses (the server's heartbeat
after ``_IDLE_S`` without events).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from headrace.cdc.errors import CdcError, SlotLostError
from headrace.cdc.kafka_log import Record
from headrace.cdc.mysql import Position, Table
from headrace.cdc.mysql_envelope import Encode, Source, records, row
from headrace.cdc.mysql_values import DEFAULT_MODES, Modes, from_binlog

log = logging.getLogger("headrace.cdc")
_IDLE_S = 0.05
"""The server sends a heartbeat after this long without events: the moment to write what
is pending (a transaction alone waits no longer than this for company)."""
_MAX_PENDING = 20_000
"""Records of committed source transactions gathered into one Kafka transaction at most."""
_MAX_PENDING_S = 0.2
"""How long committed source transactions may wait for company while the binlog flows."""
_EVENTS = [GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent,
           WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent]


Write = Callable[[list[Record], Position, str | None], None]
"""Writes records with the position (and GTID position) after them in one Kafka
transaction; blocks until committed."""


@dataclass(frozen=True)
class Capture:
    """What to read and how to label it."""

    connection: dict[str, Any]
    """python-mysql-replication connection settings."""
    server_id: int
    """The replica server id to read as."""
    wanted: frozenset[tuple[str, str]]
    """(database, table) pairs captured."""
    prefix: str
    connector: str
    """The source block's ``connector``: mysql or mariadb."""
    mariadb: bool
    heartbeat_s: float
    """While nothing captured changes, the position is written at most this often."""
    modes: Modes = DEFAULT_MODES
    encode: Encode | None = None
    """Key and value to Avro (``--schema-registry``); JSON when None."""


def stream(capture: Capture, start: Position, start_gtid: str | None, write: Write,
           stop: threading.Event, on_ready: Callable[[str], None] | None) -> None:
    """Stream from ``start_gtid`` (MariaDB) or ``start`` (MySQL) until ``stop``. Blocks;
    raises ``CdcError``, ``SlotLostError`` when the server no longer has that binlog."""
    mariadb = capture.mariadb
    reader = BinLogStreamReader(
        connection_settings=capture.connection, server_id=capture.server_id,
        resume_stream=True, blocking=True, only_events=_EVENTS, is_mariadb=mariadb,
        # rows of other tables are skipped unparsed (the reader matches table names alone,
        # so the exact (database, table) check stays below)
        only_schemas=sorted({d for d, _ in capture.wanted}),
        only_tables=sorted({t for _, t in capture.wanted}),
        **({"auto_position": start_gtid or ""} if mariadb else
           {"log_file": start.file, "log_pos": start.pos}), slave_heartbeat=_IDLE_S,
        enable_logging=False, freeze_schema=True)
    if on_ready is not None:
        on_ready(f"GTID {start_gtid}" if mariadb else f"{start.file}:{start.pos}")
    txn: list[Record] | None = None
    pending: list[Record] = []
    pending_since = 0.0
    end: Position = start
    domains = _domains(start_gtid)
    txn_gtid: str | None = None
    thread: int | None = None
    last_write = time.monotonic()
    written = start

    def flush() -> None:
        nonlocal pending, last_write, written
        write(pending, end, ",".join(domains.values()) if mariadb else None)
        pending, last_write, written = [], time.monotonic(), end

    def commit(event: Any) -> None:
        nonlocal txn, end, pending_since
        end = Position(reader.log_file, int(event.packet.log_pos))
        if txn_gtid is not None:
            domains[txn_gtid.split("-", 1)[0]] = txn_gtid
        if txn:
            if not pending:
                pending_since = time.monotonic()
            pending.extend(txn)
        txn = None

    try:
        while not stop.is_set():
            try:
                event = reader.fetchone()
            except pymysql.MySQLError as e:
                message = str(e.args[-1])
                if e.args[0] == 1236:  # ER_MASTER_FATAL_ERROR_READING_BINLOG
                    where = f"GTID {start_gtid}" if mariadb else f"{start.file}:{start.pos}"
                    raise SlotLostError(
                        f"the binlog at {where}, where the log's offsets resume, can't be "
                        f"read ({message}): changes after it are lost; re-snapshot with "
                        "--snapshot always") from e
                raise CdcError(f"reading the binlog failed: {message}") from e
            if event is None:
                continue
            if isinstance(event, HeartbeatLogEvent | RotateEvent):
                if pending or (end != written and
                               time.monotonic() - last_write >= capture.heartbeat_s):
                    flush()
                continue
            if isinstance(event, MariadbGtidEvent | GtidEvent):
                txn, txn_gtid, thread = [], str(event.gtid), None
                if isinstance(event, MariadbGtidEvent) and event.flags & 1:
                    txn = None  # FL_STANDALONE: a DDL statement, no BEGIN/COMMIT follows
                    commit(event)
            elif isinstance(event, QueryEvent):
                query = event.query.strip().upper() if isinstance(event.query, str) else ""
                if query == "BEGIN":
                    txn = txn if txn is not None else []
                    thread = int(event.slave_proxy_id)
                elif query in ("COMMIT", "ROLLBACK"):
                    # in the binlog, a ROLLBACK ends changes a non-transactional engine
                    # made anyway: they stay
                    commit(event)
                elif query.startswith(("SAVEPOINT", "ROLLBACK TO", "RELEASE SAVEPOINT",
                                       "XA ")):
                    pass  # inside a transaction
                elif txn is None or not txn:
                    # DDL (its own transaction): the next TABLE_MAP has the new shape
                    commit(event)
            elif isinstance(event, XidEvent):
                commit(event)
            elif isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                if (event.schema, event.table) not in capture.wanted:
                    continue
                if txn is None:
                    txn = []
                txn.extend(_changes(capture, event, reader.log_file, txn_gtid, thread))
            if pending and txn is None and (len(pending) >= _MAX_PENDING or
                                            time.monotonic() - pending_since >= _MAX_PENDING_S):
                flush()
            elif txn is None and not pending and end != written and \
                    time.monotonic() - last_write >= capture.heartbeat_s:
                flush()  # only other tables change: keep the stored position near
    finally:
        reader.close()


def table_from_binlog(event: Any) -> Table:
    """A captured table as a rows event's TABLE_MAP describes it."""
    columns = event.columns
    key = tuple(str(c.name) for c in columns if c.is_primary)
    if not key:
        raise CdcError(f"table {event.schema}.{event.table} has no primary key in the "
                       "binlog metadata (binlog_row_metadata=FULL?)")
    return Table(event.schema, event.table, tuple(str(c.name) for c in columns), key,
                 tuple(from_binlog(c) for c in columns))


def _changes(capture: Capture, event: Any, file: str, gtid: str | None,
             thread: int | None) -> list[Record]:
    table = table_from_binlog(event)
    prefix, modes, encode = capture.prefix, capture.modes, capture.encode
    out: list[Record] = []
    for i, change in enumerate(event.rows):
        source = Source(prefix, int(event.timestamp) * 1000, int(event.packet.server_id),
                        file, int(event.packet.log_pos) - int(event.packet.event_size),
                        gtid=gtid, row=i, thread=thread, connector=capture.connector)
        if isinstance(event, WriteRowsEvent):
            out += records(prefix, table, "c", None,
                           row(table, change["values"], change.get("none_sources"), modes),
                           source, encode)
        elif isinstance(event, UpdateRowsEvent):
            out += records(prefix, table, "u",
                           row(table, change["before_values"],
                               change.get("before_none_sources"), modes),
                           row(table, change["after_values"], change.get("after_none_sources"),
                               modes),
                           source, encode)
        else:
            before = row(table, change["values"], change.get("none_sources"), modes)
            out += records(prefix, table, "d", before, None, source, encode)
    return out


def _domains(gtid: str | None) -> dict[str, str]:
    """``"0-1-9,1-2-5"`` -> {"0": "0-1-9", "1": "1-2-5"} (MariaDB: one per domain)."""
    return {g.split("-", 1)[0]: g for g in (gtid or "").split(",") if g.strip()}
