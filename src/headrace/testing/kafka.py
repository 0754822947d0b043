"""Apache Kafka (the reference broker) for tests: KRaft properties, its JVM command, ``ApacheKafka``.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
import uuid
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from headrace.testing.process import (
    EmbeddedBrokerError,
    ServerProcess,
    free_port,
    scaled,
)


class ApacheKafka(ServerProcess):
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
        self.port = free_port(host)
        self.controller_port = free_port(host)
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
    that finds the archive stale starts without it, silently), ``jvm.extra_options()``
    before ``jvm_options``. Raises ``JvmUnavailableError``."""
    from headrace import jvm
    log_config = jvm.lib_dir().parent / "kafka" / "config" / "log4j2.yaml"
    archive = kafka_class_archive()
    sharing = ([f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off"]
               if archive.is_file()
               and not any(o.startswith("-XX:ArchiveClassesAtExit") for o in jvm_options)
               else [])
    return [jvm.java_executable(), *sharing, *jvm.extra_options(), *jvm_options,
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
