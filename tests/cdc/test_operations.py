"""What an operator sees: one clear line (no secret, no traceback, no client log flood)
and a non-zero exit when the database or the brokers can't be reached; the slot's
position confirmed at once after a restart; ``headrace cdc status``."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from headrace.testing import EmbeddedBroker, PostgresServer, _free_port, scaled
from tests.cdc.support import ConnectorProcess, execute, query

SECRET = "hunter2-not-for-logs"


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headrace", "cdc", *args],
                          capture_output=True, text=True, timeout=scaled(timeout),
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


def test_an_unreachable_database_is_one_line_without_the_password(
        broker: EmbeddedBroker) -> None:
    dsn = (f"host=127.0.0.1 port={_free_port('127.0.0.1')} user=cdc dbname=shop "
           f"password={SECRET}")
    done = _cli("postgres", "--dsn", dsn, "--tables", "public.t", "--bootstrap-servers",
                broker.bootstrap_servers, "--timeout-seconds", "2")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "cannot connect to PostgreSQL" in lines[0] and "password=***" in lines[0]
    assert SECRET not in done.stderr


def test_unreachable_brokers_are_one_line_after_the_timeout(
        postgres: PostgresServer, name: str) -> None:
    execute(postgres.dsn, f"CREATE SCHEMA {name}", f"CREATE TABLE {name}.t (id int PRIMARY KEY)")
    nowhere = f"127.0.0.1:{_free_port('127.0.0.1')}"
    started = time.monotonic()
    done = _cli("postgres", "--dsn", f"{postgres.dsn} password={SECRET}", "--tables",
                f"{name}.t", "--bootstrap-servers", nowhere, "--slot", name, "--publication",
                name, "--timeout-seconds", "3")
    assert time.monotonic() - started >= 3  # it waited as long as told
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"error: cannot reach the Kafka brokers at {nowhere} within 3 s (--timeout-seconds)"
    ], done.stderr
    assert SECRET not in done.stderr
