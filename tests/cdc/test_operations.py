"""What an operator sees: one clear line (no secret, no traceback, no client log flood)
and a non-zero exit when the database or the brokers can't be reached; the slot's
position confirmed at once after a restart; ``headrace cdc status``."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from headrace.testing import EmbeddedBroker, PostgresServer, free_port, scaled
from tests.cdc.support import ConnectorProcess, execute, query

SECRET = "hunter2-not-for-logs"


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headrace", "cdc", *args],
                          capture_output=True, text=True, timeout=scaled(timeout),
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


def test_an_unreachable_database_is_one_line_without_the_password(
        broker: EmbeddedBroker) -> None:
    dsn = (f"host=127.0.0.1 port={free_port('127.0.0.1')} user=cdc dbname=shop "
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
    nowhere = f"127.0.0.1:{free_port('127.0.0.1')}"
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


def test_losing_the_database_while_streaming_is_one_line(
        postgres: PostgresServer, broker: EmbeddedBroker, name: str) -> None:
    execute(postgres.dsn, f"CREATE SCHEMA {name}", f"CREATE TABLE {name}.t (id int PRIMARY KEY)")
    connector = ConnectorProcess(f"{postgres.dsn} password={SECRET}", f"{name}.t",
                                 broker.bootstrap_servers, name).start()
    try:
        execute(postgres.dsn, "SELECT pg_terminate_backend(active_pid) FROM "
                              f"pg_replication_slots WHERE slot_name = '{name}'")
        assert connector.process is not None
        assert connector.process.wait(scaled(30)) == 1
        deadline = time.monotonic() + scaled(10)  # the drain thread reads the last line
        while not any("error" in line for line in connector.output_lines()):
            assert time.monotonic() < deadline, connector.output_lines()
            time.sleep(0.05)
    finally:
        connector.stop()
    output = [line.rstrip("\n") for line in connector.output_lines()
              if not line.startswith("headrace cdc streaming")]
    assert output == ["error: PostgreSQL: terminating connection due to administrator command"]


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def test_a_restart_confirms_the_slot_at_once_and_status_shows_the_lag(
        postgres: PostgresServer, broker: EmbeddedBroker, name: str) -> None:
    """The captured table is idle while another churns with no connector running:
    ``cdc status`` shows the lag and warns past its threshold. On restart the slot's
    confirmed position moves to the server's WAL end as soon as the stream has shown
    nothing is pending, not at the next heartbeat (none comes in this test)."""
    execute(postgres.dsn, f"CREATE SCHEMA {name}", f"CREATE TABLE {name}.quiet (id int "
            "PRIMARY KEY)", f"CREATE TABLE {name}.busy (id serial PRIMARY KEY, pad text)")
    args = (postgres.dsn, f"{name}.quiet", broker.bootstrap_servers, name,
            "--heartbeat-seconds", "600")
    with ConnectorProcess(*args):
        pass
    execute(postgres.dsn, f"INSERT INTO {name}.busy (pad) SELECT repeat('x', 500) "
                          "FROM generate_series(1, 2000)")  # ~1.3 MB of WAL
    target = _lsn(query(postgres.dsn, "SELECT pg_current_wal_lsn()::text")[0][0])

    def confirmed() -> int:
        rows = query(postgres.dsn, "SELECT confirmed_flush_lsn::text FROM "
                                   f"pg_replication_slots WHERE slot_name = '{name}'")
        return _lsn(rows[0][0])

    behind = target - confirmed()
    assert behind > 1_000_000
    status = ("status", "--dsn", f"{postgres.dsn} password={SECRET}", "--slot", name,
              "--bootstrap-servers", broker.bootstrap_servers)
    warned = _cli(*status, "--warn-retained-mb", "1")
    assert warned.returncode == 2, warned.stderr
    first = warned.stdout.splitlines()[0]
    # PostgreSQL writes WAL of its own meanwhile: the lag is the one between the positions
    # the status read, the server's no earlier than the test's own reading
    said_confirmed = _lsn(first.split("confirmed ")[1].split(",")[0])
    server_at = _lsn(first.split("server at ")[1].split(",")[0])
    assert said_confirmed == confirmed() and server_at >= target
    lag = server_at - said_confirmed
    assert lag >= behind
    assert f"lag {lag} bytes, " in first and " s (connector not running)" in first
    lag_s = float(first.split(f"lag {lag} bytes, ")[1].split(" s ")[0])
    assert 0 < lag_s < scaled(120)
    retained = warned.stderr.split("retains ")[1].split(" MB")[0]
    assert float(retained) > 1
    assert warned.stderr.strip().splitlines() == [
        f"warning: slot {name} retains {retained} MB of WAL (more than --warn-retained-mb "
        "1): the connector is not running"]
    with ConnectorProcess(*args):
        deadline = time.monotonic() + scaled(10)
        while confirmed() < target:
            assert time.monotonic() < deadline, "the slot's position did not move"
            time.sleep(0.1)
        calm = _cli(*status)  # the default threshold: 1024 MB
    assert calm.returncode == 0 and calm.stderr == "", calm.stderr
    assert "(caught up)" in calm.stdout or "(connector streaming)" in calm.stdout
    assert SECRET not in warned.stdout + warned.stderr + calm.stdout
