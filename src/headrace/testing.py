"""Public test helpers: ``EmbeddedBroker`` runs a real broker process for tests and notebooks.

The broker is a separate process (``python -m headrace broker``), so tests talk to it over
TCP exactly as clients would, and can ``kill -9`` and restart it on the same data.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from headrace.errors import HeadraceError

READY_PREFIX = "headrace broker listening on "
METRICS_PREFIX = "headrace broker metrics on "
LISTENER_PREFIX = "headrace broker listener "


TIMEOUT_SCALE_ENV = "HEADRACE_TEST_TIMEOUT_SCALE"


class EmbeddedBrokerError(HeadraceError):
    """The embedded broker did not start or stop as expected."""


def timeout_scale() -> float:
    """The factor every timeout of headrace's tests and test helpers is multiplied by:
    ``HEADRACE_TEST_TIMEOUT_SCALE`` (default 1; raise it on a slow or busy machine). A
    timeout is how long to wait for something that should happen, never how long a test
    is allowed to take to pass. Read on every call; an invalid value raises."""
    raw = os.environ.get(TIMEOUT_SCALE_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        scale = float(raw)
    except ValueError:
        scale = 0.0
    if not scale > 0:
        raise EmbeddedBrokerError(f"{TIMEOUT_SCALE_ENV} must be a positive number, not {raw!r}")
    return scale


def scaled(seconds: float) -> float:
    """``seconds`` times ``timeout_scale()``: the one way tests derive a timeout."""
    return seconds * timeout_scale()


class _ServerProcess:
    """A server subprocess whose output is kept (the last 500 lines) for error messages."""

    process: subprocess.Popen[str] | None
    output: deque[str]
    _output_lock = threading.Lock()  # the drain thread appends while callers read

    def _drain(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with self._output_lock:
                self.output.append(line)

    def output_lines(self) -> list[str]:
        """A copy of the kept output lines, safe while the process still prints."""
        with self._output_lock:
            return list(self.output)

    def _wait_ready(self, marker: str, timeout: float, what: str) -> str:
        """Read output until a line contains ``marker``; return it. Blocks up to ``timeout``."""
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + scaled(timeout)
        while True:
            line = self.process.stdout.readline()
            if not line:
                self.process.wait()
                raise EmbeddedBrokerError(f"{what} exited during start-up:\n"
                                          + "".join(self.output_lines()))
            self.output.append(line)
            if marker in line:
                threading.Thread(target=self._drain, args=(self.process,), daemon=True).start()
                return line
            if time.monotonic() > deadline:
                self.kill()
                raise EmbeddedBrokerError(f"{what} did not start in time:\n"
                                          + "".join(self.output_lines()))

    def stop(self, timeout: float = 15.0) -> int:
        """Stop cleanly (SIGTERM) and return the exit code; SIGKILL after ``timeout``."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else 0
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def kill(self) -> None:
        """SIGKILL the process: no flush, no clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class EmbeddedBroker(_ServerProcess):
    """A broker subprocess on a free port with its own data directory.

    ``with EmbeddedBroker() as b: ... b.bootstrap_servers``. The data directory is a
    fresh temporary one (removed on exit) unless ``data_dir`` is given. ``extra_args``
    are passed to ``headrace broker`` (e.g. ``["--fsync"]``); ``launcher`` replaces
    ``python -m headrace`` (fault-injection tests). ``kill()`` sends SIGKILL;
    ``start()`` again restarts on the same port and data (recovery runs).
    """

    def __init__(self, data_dir: str | Path | None = None, extra_args: list[str] | None = None,
                 host: str = "127.0.0.1", start_timeout: float = 30.0,
                 launcher: list[str] | None = None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="headrace-"))
        self.extra_args = list(extra_args or [])
        self.metrics_url: str | None = None  # with "--metrics-port": the scrape URL
        # with "--listener"s: listener name -> HOST:PORT, for each but the first
        self.listeners: dict[str, str] = {}
        # the command that runs headrace's CLI; tests substitute one with a fault hook
        self.launcher = list(launcher or [sys.executable, "-m", "headrace"])
        # extra environment variables of the process (fault injection), set before start()
        self.env: dict[str, str] = {}
        self.host = host
        self.port = 0
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)

    @property
    def bootstrap_servers(self) -> str:
        if not self.port:
            raise EmbeddedBrokerError("broker not started")
        return f"{self.host}:{self.port}"

    def start(self) -> EmbeddedBroker:
        """Start the process and wait until it accepts connections. Blocks."""
        if self.process is not None and self.process.poll() is None:
            raise EmbeddedBrokerError("broker already running")
        cmd = [*self.launcher, "broker", "--host", self.host,
               "--port", str(self.port), "--data-dir", str(self.data_dir), *self.extra_args]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env)
        line = self._wait_ready(READY_PREFIX, self.start_timeout, "broker")
        self.port = int(line.strip().rsplit(":", 1)[1])
        lines = self.output_lines()
        # the last one: after a restart the kept output still holds the previous run's
        self.metrics_url = next((ln.strip().rsplit(" ", 1)[1] for ln in reversed(lines)
                                 if ln.startswith(METRICS_PREFIX)), None)
        self.listeners = {ln.split()[3]: ln.strip().rsplit(" ", 1)[1] for ln in lines
                          if ln.startswith(LISTENER_PREFIX)}
        return self

    def restart(self) -> EmbeddedBroker:
        self.stop()
        return self.start()

    @property
    def pid(self) -> int:
        if self.process is None:
            raise EmbeddedBrokerError("broker not started")
        return self.process.pid

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


class ApacheKafka(_ServerProcess):
    """A real single-node Apache Kafka (KRaft, broker and controller in one JVM) for tests.

    The reference that headrace's behaviour is compared against: same use as
    ``EmbeddedBroker`` (``with ApacheKafka() as k: k.bootstrap_servers``), started from the
    jars that ``make setup`` resolved into ``jvm/lib/kafka`` (``headrace.jvm``). Blocks in
    ``start()`` until the broker serves requests (about 5-10 s). ``configs`` are extra
    ``server.properties`` lines (Kafka's names), e.g. ``{"num.partitions": "4"}``; internal
    topics are single-replica. Raises ``headrace.jvm.JvmUnavailableError`` without the jars.
    """

    READY_MARKER = "Kafka Server started"

    def __init__(self, configs: dict[str, str] | None = None, host: str = "127.0.0.1",
                 heap: str = "768m", start_timeout: float = 90.0,
                 jvm_options: Sequence[str] = ()) -> None:
        self.configs = dict(configs or {})
        self.host = host
        self.heap = heap
        self.jvm_options = list(jvm_options)  # the broker's JVM only, not the formatting
        self.start_timeout = start_timeout
        self.data_dir = Path(tempfile.mkdtemp(prefix="apache-kafka-"))
        self.port = _free_port(host)
        self.controller_port = _free_port(host)
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> ApacheKafka:
        """Format the storage on first start, start the JVM, wait until ready. Blocks."""
        if self.process is not None and self.process.poll() is None:
            raise EmbeddedBrokerError("Apache Kafka already running")
        props = write_kraft_properties(self.data_dir / "server.properties", self.host,
                                       self.port, self.controller_port,
                                       self.data_dir / "logs", self.configs)
        jvm_options = [f"-Xmx{self.heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
        if not (self.data_dir / "logs" / "meta.properties").exists():
            format_kraft_storage(props, jvm_options)
        self.process = subprocess.Popen(kafka_java_command("kafka.Kafka", str(props),
                                                           jvm_options=[*jvm_options,
                                                                        *self.jvm_options]),
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        self._wait_ready(self.READY_MARKER, self.start_timeout, "Apache Kafka")
        return self

    def stop(self, timeout: float = 30.0) -> int:
        """Controlled shutdown (SIGTERM); SIGKILL after ``timeout``. Returns the exit code."""
        return super().stop(timeout)

    def __enter__(self) -> ApacheKafka:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def write_kraft_properties(path: Path, host: str, port: int, controller_port: int,
                           log_dir: Path, configs: dict[str, str] | None = None) -> Path:
    """Write a single-node KRaft ``server.properties`` (broker and controller in one
    process, single-replica internal topics, Kafka's defaults for everything durable) with
    ``configs`` on top; returns ``path``."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        **(configs or {}),
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def kafka_class_archive() -> Path:
    """Where ``make setup`` keeps the class-data archive of Apache Kafka's JVMs
    (``python -m headrace.cluster.archive``)."""
    from headrace import jvm
    return jvm.lib_dir() / "kafka-classes.jsa"


def kafka_java_command(main: str, *args: str, jvm_options: Sequence[str] = ()) -> list[str]:
    """``java`` running ``main`` on Apache Kafka's classpath (``jvm/lib/kafka``) with quiet
    logging (``jvm/kafka/config/log4j2.yaml``), its classes mapped from the class-data
    archive when ``make setup`` built one (a broker starts on about half the CPU; a JVM
    that finds the archive stale starts without it, silently). Raises
    ``JvmUnavailableError``."""
    from headrace import jvm
    log_config = jvm.lib_dir().parent / "kafka" / "config" / "log4j2.yaml"
    archive = kafka_class_archive()
    sharing = ([f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off"]
               if archive.is_file()
               and not any(o.startswith("-XX:ArchiveClassesAtExit") for o in jvm_options)
               else [])
    return [jvm.java_executable(), *sharing, *jvm_options,
            f"-Dlog4j2.configurationFile={log_config}", "-cp", jvm.classpath("kafka"), main,
            *args]


def format_kraft_storage(properties: Path, jvm_options: Sequence[str] = ()) -> None:
    """Format the log directory of ``properties`` with a fresh random cluster id (Kafka's
    ``kafka-storage.sh format``). Blocks a few seconds; raises ``EmbeddedBrokerError``."""
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    fmt = subprocess.run(
        # "--cluster-id=": a random id may start with "-", which argparse4j would take for
        # an option if passed as a separate argument.
        kafka_java_command("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                           "-c", str(properties), jvm_options=jvm_options),
        capture_output=True, text=True, timeout=scaled(120))
    if fmt.returncode != 0:
        raise EmbeddedBrokerError(f"formatting Kafka's storage failed:\n{fmt.stdout}{fmt.stderr}")


def _client_args(settings: Mapping[str, str]) -> list[str]:
    return [arg for k, v in settings.items() for arg in ("-X", f"{k}={v}")]


class SchemaRegistryProcess(_ServerProcess):
    """A ``headrace registry`` subprocess against ``bootstrap_servers``, for tests.

    ``with SchemaRegistryProcess(broker.bootstrap_servers) as r: ... r.url``. ``start()``
    blocks until ``_schemas`` is replayed and HTTP is served; ``kill()`` is SIGKILL, and
    ``start()`` again comes back on the same port. ``topic`` and ``group`` as the CLI's;
    ``client_config``: the registry's Kafka client settings (``headrace -X``).
    """

    READY_MARKER = "headrace registry listening on "

    def __init__(self, bootstrap_servers: str, topic: str = "_schemas",
                 group: str = "headrace-schema-registry", host: str = "127.0.0.1",
                 start_timeout: float = 60.0,
                 client_config: Mapping[str, str] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.client_config = dict(client_config or {})
        self.topic = topic
        self.group = group
        self.host = host
        self.port = _free_port(host)
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> SchemaRegistryProcess:
        """Start the process; wait until it serves. Blocks."""
        if self.process is not None and self.process.poll() is None:
            raise EmbeddedBrokerError("registry already running")
        cmd = [sys.executable, "-m", "headrace", *_client_args(self.client_config),
               "registry", "--bootstrap-servers",
               self.bootstrap_servers, "--host", self.host, "--port", str(self.port),
               "--topic", self.topic, "--group", self.group]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self._wait_ready(self.READY_MARKER, self.start_timeout, "registry")
        return self

    def __enter__(self) -> SchemaRegistryProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class ConsoleProcess(_ServerProcess):
    """A ``headrace console`` subprocess on ``bootstrap_servers`` (for tests and demos):
    ``with ConsoleProcess(servers) as c: ... c.url``. ``sample_seconds`` as the CLI's;
    ``client_config``: the console's Kafka client settings (``headrace -X``)."""

    READY_MARKER = "headrace console on "

    def __init__(self, bootstrap_servers: str, registry_url: str = "",
                 pipeline_metrics: Sequence[str] = (), host: str = "127.0.0.1",
                 sample_seconds: float = 5.0, start_timeout: float = 30.0,
                 client_config: Mapping[str, str] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.client_config = dict(client_config or {})
        self.registry_url = registry_url
        self.pipeline_metrics = list(pipeline_metrics)
        self.host = host
        self.sample_seconds = sample_seconds
        self.start_timeout = start_timeout
        self.url = ""
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)

    def start(self) -> ConsoleProcess:
        """Start the process; wait until it serves. Blocks."""
        cmd = [sys.executable, "-m", "headrace", *_client_args(self.client_config),
               "console", "-b", self.bootstrap_servers,
               "--host", self.host, "--port", "0", "--sample-seconds", str(self.sample_seconds)]
        if self.registry_url:
            cmd += ["--registry", self.registry_url]
        for url in self.pipeline_metrics:
            cmd += ["--pipeline-metrics", url]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        line = self._wait_ready(self.READY_MARKER, self.start_timeout, "console")
        self.url = line.strip().rsplit(" ", 1)[1].rstrip("/")
        return self

    def __enter__(self) -> ConsoleProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


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
        self.port = _free_port(host)
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
        self.port = _free_port(host)
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


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


WEED_ENV = "HEADRACE_WEED"


def weed_binary() -> str | None:
    """SeaweedFS's ``weed``: ``$HEADRACE_WEED``, the one ``make setup`` builds into
    ``.tools/bin`` of the source tree, or one on ``PATH``; None if there is none."""
    explicit = os.environ.get(WEED_ENV)
    if explicit:
        return explicit
    built = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "weed"
    if built.exists():
        return str(built)
    return shutil.which("weed")


class SeaweedS3(_ServerProcess):
    """A real S3-compatible object store for tests and the demo: SeaweedFS (master,
    volume server, filer and S3 gateway in one ``weed server`` process) on free ports,
    with a temporary data directory removed on exit. ``endpoint`` is its S3 URL; access
    is anonymous (no identities configured). ``stop()`` and ``start()`` again keep the
    data (an outage test); ``kill()`` sends SIGKILL."""

    def __init__(self, host: str = "127.0.0.1", start_timeout: float = 60.0) -> None:
        binary = weed_binary()
        if binary is None:
            raise EmbeddedBrokerError("SeaweedFS's weed was not found: run `make setup` "
                                      f"(scripts/setup-weed.sh) or set {WEED_ENV}")
        self.binary = binary
        self.host = host
        self.dir = Path(tempfile.mkdtemp(prefix="headrace-weed-"))
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)
        self.ports: dict[str, int] = {}

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.ports['s3']}"

    def start(self) -> SeaweedS3:
        """Start (or restart on the same ports and data) and wait until S3 answers."""
        if not self.ports:
            names = ("master", "master.grpc", "volume", "volume.grpc", "filer",
                     "filer.grpc", "s3", "s3.grpc")
            self.ports = {n: _free_port(self.host) for n in names}
        p = self.ports
        cmd = [self.binary, "server", f"-dir={self.dir}", f"-ip={self.host}",
               f"-ip.bind={self.host}", f"-master.port={p['master']}",
               f"-master.port.grpc={p['master.grpc']}", f"-volume.port={p['volume']}",
               f"-volume.port.grpc={p['volume.grpc']}", f"-filer.port={p['filer']}",
               f"-filer.port.grpc={p['filer.grpc']}", "-s3", f"-s3.port={p['s3']}",
               f"-s3.port.grpc={p['s3.grpc']}", "-s3.port.iceberg=0", "-s3.port.lance=0",
               "-volume.max=100",
               "-master.volumeSizeLimitMB=64", "-metricsPort=0"]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, cwd=self.dir)
        threading.Thread(target=self._drain, args=(self.process,), daemon=True).start()
        self._wait_s3()
        return self

    def _wait_s3(self) -> None:
        """Poll until an object can be stored (the gateway answers before the filer and
        volume servers are ready to store; after a restart the bucket exists already)."""
        import boto3
        from botocore.config import Config

        client = boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id="any", aws_secret_access_key="any",
            config=Config(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1}))
        deadline = time.monotonic() + scaled(self.start_timeout)
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise EmbeddedBrokerError("weed exited during start-up:\n"
                                          + "".join(self.output_lines()))
            try:
                try:
                    client.create_bucket(Bucket="headrace-ready")
                except client.exceptions.BucketAlreadyOwnedByYou:
                    pass
                except client.exceptions.BucketAlreadyExists:
                    pass
                client.put_object(Bucket="headrace-ready", Key="ready", Body=b"1")
                client.close()
                return
            except Exception:  # not up yet: any failure means try again
                if time.monotonic() > deadline:
                    client.close()
                    self.kill()
                    raise EmbeddedBrokerError("weed did not start in time:\n"
                                              + "".join(self.output_lines())) from None
                time.sleep(0.2)

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
