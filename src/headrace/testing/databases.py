"""Throwaway PostgreSQL and MariaDB servers in a temp dir, for CDC tests and the demo.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from headrace.testing.process import (
    EmbeddedBrokerError,
    free_port,
    scaled,
)


class PostgresServer:
    """A throwaway PostgreSQL cluster in a temporary directory (``initdb``, ``pg_ctl``),
    with ``wal_level=logical``, for tests and the demo.

    ``with PostgresServer() as pg: ... pg.dsn``. Runs as the ``postgres`` user when this
    process is root (PostgreSQL refuses root). Trust authentication on 127.0.0.1 only.
    ``settings`` are extra ``-c name=value`` server settings. Raises ``EmbeddedBrokerError``
    when PostgreSQL's binaries are missing or the server does not start.
    """

    def __init__(self, settings: dict[str, str] | None = None, host: str = "127.0.0.1") -> None:
        # Slots and senders for every connector a whole test session starts on one server
        # (test slots are left behind): 16 ran out once the type matrix came.
        self.settings = {"wal_level": "logical", "max_replication_slots": "100",
                         "max_wal_senders": "100", "max_connections": "300", "fsync": "off",
                         **(settings or {})}
        self.host = host
        self.port = free_port(host)
        self.dir = Path(tempfile.mkdtemp(prefix="headrace-pg-"))
        self.data = self.dir / "data"

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user=postgres dbname=postgres"

    def _as_owner(self) -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _bin(self, name: str) -> str:
        found = shutil.which(name)
        if found is None:
            candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
            if not candidates:
                raise EmbeddedBrokerError(f"PostgreSQL's {name} not found (Debian package "
                                          "postgresql; `make setup` installs it)")
            found = str(candidates[-1])
        return found

    def start(self) -> PostgresServer:
        """initdb (first start), then start the server and wait until it accepts. Blocks."""
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        if not self.data.exists():
            subprocess.run([*self._as_owner(), self._bin("initdb"), "-D", str(self.data),
                            "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
                           check=True, capture_output=True)
        options = " ".join(f"-c {k}={v}" for k, v in {
            **self.settings, "listen_addresses": self.host, "port": str(self.port),
            "unix_socket_directories": str(self.dir)}.items())
        done = subprocess.run([*self._as_owner(), self._bin("pg_ctl"), "-D", str(self.data),
                               "-o", options, "-l", str(self.dir / "server.log"), "-w",
                               "-t", str(round(scaled(60))), "start"], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = (self.dir / "server.log").read_text() if (self.dir / "server.log").exists() \
                else ""
            raise EmbeddedBrokerError(f"PostgreSQL did not start: {done.stderr}{log[-2000:]}")
        return self

    def stop(self) -> None:
        """Fast shutdown. Idempotent."""
        if (self.data / "postmaster.pid").exists():
            subprocess.run([*self._as_owner(), self._bin("pg_ctl"), "-D", str(self.data),
                            "-m", "fast", "-w", "-t", str(round(scaled(60))), "stop"], capture_output=True, check=False)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class MariaDBServer:
    """A throwaway MariaDB server in a temporary directory (``mariadb-install-db``,
    ``mariadbd``) writing a row-based binlog with full row images (what CDC reads), for
    tests and the demo.

    ``with MariaDBServer() as db: ... db.dsn``: user root without a password on 127.0.0.1
    (and the socket in the directory), database ``headrace``. ``settings`` are extra
    ``--name=value`` server options. Raises ``EmbeddedBrokerError`` when MariaDB's binaries
    are missing or the server does not start.
    """

    def __init__(self, settings: dict[str, str] | None = None, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = free_port(host)
        self.dir = Path(tempfile.mkdtemp(prefix="headrace-mariadb-"))
        self.data = self.dir / "data"
        self.socket = self.dir / "mariadb.sock"
        self.settings = {
            "log-bin": str(self.dir / "binlog"), "binlog-format": "ROW",
            "binlog-row-image": "FULL", "binlog-row-metadata": "FULL", "server-id": "1",
            "gtid-domain-id": "0", "character-set-server": "utf8mb4",
            "collation-server": "utf8mb4_general_ci",
            "log-slave-updates": "ON",
            # a test server: durability is not the point, start-up time and disk are
            "innodb-flush-log-at-trx-commit": "2", "sync-binlog": "0",
            "innodb-buffer-pool-size": "32M", "innodb-log-file-size": "16M",
            "performance-schema": "OFF", "skip-name-resolve": "ON",
            **(settings or {})}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return f"mysql://root@{self.host}:{self.port}/headrace"

    def _bin(self, name: str) -> str:
        found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
        if found is None:
            raise EmbeddedBrokerError(f"MariaDB's {name} not found (Debian package "
                                      "mariadb-server; `make setup` installs it)")
        return found

    def _user(self) -> list[str]:
        # mariadbd refuses to run as root unless told to
        return ["--user=root"] if os.geteuid() == 0 else []

    def start(self) -> MariaDBServer:
        """Install the system tables (first start), start the server, wait until it accepts
        connections and create the ``headrace`` database. Blocks."""
        if not self.data.exists():
            subprocess.run([self._bin("mariadb-install-db"), "--no-defaults", *self._user(),
                            f"--datadir={self.data}", "--auth-root-authentication-method=normal",
                            "--skip-test-db"], check=True, capture_output=True)
        log = self.dir / "server.log"
        options = [f"--{k}={v}" for k, v in self.settings.items()]
        self.process = subprocess.Popen(
            [self._bin("mariadbd"), "--no-defaults", *self._user(), f"--datadir={self.data}",
             f"--port={self.port}", f"--bind-address={self.host}", f"--socket={self.socket}",
             f"--pid-file={self.dir / 'mariadb.pid'}", f"--log-error={log}", *options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + scaled(60)
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                text = log.read_text() if log.exists() else ""
                self.stop()
                raise EmbeddedBrokerError(f"MariaDB did not start: {text[-2000:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    pass
            except OSError:
                time.sleep(0.1)
                continue
            done = subprocess.run([self._bin("mariadb"), "--no-defaults", "-uroot",
                                   f"--socket={self.socket}", "-e",
                                   "CREATE DATABASE IF NOT EXISTS headrace"],
                                  capture_output=True, check=False)
            if done.returncode == 0:
                return self
            time.sleep(0.1)

    def stop(self) -> None:
        """Shut down (SIGTERM, then SIGKILL after a while). Idempotent."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(scaled(30))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> MariaDBServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
