"""A MariaDB server, a ``headrace cdc mysql`` process and SQL helpers, for the MySQL tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from headrace.testing import MariaDBServer, ServerProcess

READY = "headrace cdc streaming "


@pytest.fixture(scope="module")
def mariadb() -> Iterator[MariaDBServer]:
    """One throwaway MariaDB per test module (import it into the module)."""
    with MariaDBServer() as db:
        yield db


class MySqlConnectorProcess(ServerProcess):
    """``headrace cdc mysql`` as a subprocess; ``kill()`` is SIGKILL."""

    def __init__(self, dsn: str, tables: str, bootstrap: str, name: str, *extra: str) -> None:
        self.args = ["--dsn", dsn, "--tables", tables, "--bootstrap-servers", bootstrap,
                     "--topic-prefix", name, "--name", name, "--heartbeat-seconds", "0.5",
                     *extra]
        self.start_timeout = 60.0  # scaled by _wait_ready
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)

    def start(self) -> MySqlConnectorProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "headrace", "cdc", "mysql", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self._wait_ready(READY, self.start_timeout, "connector")
        return self

    def __enter__(self) -> MySqlConnectorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def connect(db: MariaDBServer, database: str = "headrace") -> Any:
    return pymysql.connect(host=db.host, port=db.port, user="root", database=database,
                           autocommit=False)


def execute(db: MariaDBServer, *statements: str, database: str = "headrace") -> None:
    """The statements in one transaction (DDL commits implicitly, as MySQL does)."""
    conn = connect(db, database)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        conn.commit()
    finally:
        conn.close()


def query(db: MariaDBServer, statement: str, database: str = "headrace") -> list[Any]:
    conn = connect(db, database)
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall())
    finally:
        conn.close()
