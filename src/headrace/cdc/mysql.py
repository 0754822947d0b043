"""The MySQL/MariaDB side: the DSN, checks, the catalog, and the consistent snapshot.

Snapshot approach: **lock-free on MariaDB**, Debezium's minimal global read lock on
MySQL. One connection opens ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` (InnoDB,
REPEATABLE READ) and reads every captured table inside it; the binlog position that
snapshot corresponds to is

- on MariaDB, ``SHOW STATUS LIKE 'binlog_snapshot_%'`` read inside that transaction: the
  server records the binlog file and offset at the moment the snapshot was taken, so no
  lock is needed and writers are never blocked;
- on MySQL, which has no such status, ``FLUSH TABLES WITH READ LOCK`` is held only while
  the transaction starts and the binlog position is read (``SHOW BINARY LOG STATUS``, or
  ``SHOW MASTER STATUS`` before 8.2), then released before any row is read (what
  Debezium's ``snapshot.locking.mode=minimal`` does); writers wait for milliseconds, not
  for the snapshot.

Every change committed before that position is in the snapshot and every change after it
is in the binlog from there, so streaming starts exactly at the position: nothing is
missed or read twice across the boundary. Each function may block on the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql
import pymysql.converters
import pymysql.cursors
from pymysql.constants import FIELD_TYPE

from headrace.cdc.errors import CdcConfigError, CdcError
from headrace.cdc.mysql_values import ColumnType, from_catalog


@dataclass(frozen=True)
class Dsn:
    host: str
    port: int
    user: str
    password: str
    database: str

    @classmethod
    def parse(cls, text: str) -> Dsn:
        """``mysql://user[:password]@host[:port]/database`` (``mariadb://`` too)."""
        url = urlsplit(text)
        if url.scheme not in ("mysql", "mariadb") or not url.hostname or \
                not url.path.strip("/"):
            raise CdcConfigError("--dsn must look like mysql://user:password@host:port/database")
        return cls(url.hostname, url.port or 3306, unquote(url.username or "root"),
                   unquote(url.password or ""), unquote(url.path.strip("/")))

    def redacted(self) -> str:
        secret = ":***" if self.password else ""
        return f"mysql://{self.user}{secret}@{self.host}:{self.port}/{self.database}"

    def settings(self) -> dict[str, Any]:
        """PyMySQL / python-mysql-replication connection settings."""
        return {"host": self.host, "port": self.port, "user": self.user,
                "passwd": self.password}


@dataclass
class Table:
    """A captured table: its columns, key and types as of the snapshot or the last
    TABLE_MAP event seen for it."""

    db: str
    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    types: tuple[ColumnType, ...] = field(repr=False)


@dataclass(frozen=True)
class Position:
    """A binlog position: the next event to read is at ``pos`` in ``file``."""

    file: str
    pos: int

    def after(self, other: Position) -> bool:
        return (self.file, self.pos) > (other.file, other.pos)


def connect(dsn: Dsn, database: str | None = None) -> Any:
    """An autocommit connection, TIMESTAMP values in UTC, SET values as text.
    ``CdcConfigError`` (password never shown) when the server can't be reached."""
    conv = dict(pymysql.converters.conversions)
    conv.pop(FIELD_TYPE.SET, None)  # keep "a,b" in column order, not a Python set
    try:
        conn = pymysql.connect(**dsn.settings(), database=database or dsn.database,
                               autocommit=True, conv=conv, init_command="SET time_zone='+00:00'",
                               connect_timeout=10)
    except pymysql.MySQLError as e:
        raise CdcConfigError(f"cannot connect to {dsn.redacted()}: {e.args[-1]}") from e
    return conn


def _one(conn: Any, statement: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(statement)
        return cur.fetchone()


def check_server(conn: Any) -> bool:
    """Refuse what can't be captured; True for MariaDB, False for MySQL."""
    version = str(_one(conn, "SELECT VERSION()")[0])
    variables = {}
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', "
                    "'binlog_row_image', 'binlog_row_metadata')")
        variables = {str(k).lower(): str(v).upper() for k, v in cur.fetchall()}
    wanted = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
              "binlog_row_metadata": "FULL"}
    for name, value in wanted.items():
        if variables.get(name) != value:
            raise CdcConfigError(f"{name} is {variables.get(name, 'unset')}: capture needs "
                                 f"{name}={value} (server configuration; binlog_row_metadata "
                                 "needs MySQL 8.0.1+ or MariaDB 10.5+)")
    return "mariadb" in version.lower()


def server_id(conn: Any) -> int:
    return int(_one(conn, "SELECT @@server_id")[0])


def table_info(conn: Any, database: str, name: str) -> Table:
    """Columns, key and types from ``information_schema``. ``CdcConfigError`` when the table
    is missing or has no primary key."""
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_SCALE, "
                    "DATETIME_PRECISION, NUMERIC_PRECISION, COLUMN_KEY FROM "
                    "information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                    "ORDER BY ORDINAL_POSITION", (database, name))
        rows = cur.fetchall()
    if not rows:
        raise CdcConfigError(f"table {database}.{name} does not exist")
    key = tuple(r[0] for r in rows if r[6] == "PRI")
    if not key:
        raise CdcConfigError(f"table {database}.{name} has no primary key: add one")
    types = tuple(from_catalog(r[1], r[2], r[3], r[4], r[5]) for r in rows)
    return Table(database, name, tuple(r[0] for r in rows), key, types)


def snapshot(dsn: Dsn, tables: list[Table], mariadb: bool
             ) -> tuple[Position, str | None, Iterator[tuple[Table, tuple[Any, ...]]]]:
    """The binlog position of a consistent snapshot (and on MariaDB the GTID position
    there), and an iterator over every row of ``tables`` as of that snapshot (table by
    table; the connection closes when it ends)."""
    conn = connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            if mariadb:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
                position = Position(status["binlog_snapshot_file"],
                                    int(status["binlog_snapshot_position"]))
                gtid: str | None = gtid_at(conn, position)
            else:
                cur.execute("FLUSH TABLES WITH READ LOCK")
                try:
                    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                    position, gtid = current_position(conn), None
                finally:
                    cur.execute("UNLOCK TABLES")
    except pymysql.MySQLError as e:
        conn.close()
        raise CdcError(f"snapshot failed: {e.args[-1]}") from e
    except BaseException:
        conn.close()
        raise

    def rows() -> Iterator[tuple[Table, tuple[Any, ...]]]:
        try:
            for table in tables:
                columns = ", ".join(f"`{c}`" for c in table.columns)
                with conn.cursor(pymysql.cursors.SSCursor) as cur:
                    cur.execute(f"SELECT {columns} FROM `{table.db}`.`{table.name}`")
                    for row in cur:
                        yield table, tuple(row)
            conn.commit()
        except pymysql.MySQLError as e:
            raise CdcError(f"snapshot read failed: {e.args[-1]}") from e
        finally:
            conn.close()

    return position, gtid, rows()


def current_position(conn: Any) -> Position:
    """The binlog position after everything written so far."""
    with conn.cursor() as cur:
        try:
            cur.execute("SHOW BINARY LOG STATUS")  # MySQL 8.2+
        except pymysql.MySQLError:
            cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    if row is None:
        raise CdcConfigError("the server writes no binlog (log_bin)")
    return Position(str(row[0]), int(row[1]))


def gtid_at(conn: Any, position: Position) -> str:
    """MariaDB: the GTID position (one ``domain-server-sequence`` per replication domain,
    comma-separated) of the binlog at ``position``."""
    with conn.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
        row = cur.fetchone()
    if row is None or row[0] is None:
        raise CdcError(f"no GTID position for the binlog at {position.file}:{position.pos}")
    return str(row[0])
