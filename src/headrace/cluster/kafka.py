"""A replicated Apache Kafka cluster on this machine: one KRaft controller and N brokers.

Started from the jars ``make setup`` resolved into ``jvm/lib/kafka`` (``headrace.jvm``),
one JVM per node, each with its own ports, log directory and output file under the
cluster's directory. Durable settings are those of a production cluster (replication
factor 3, ``min.insync.replicas=2``, unclean leader election off, the internal topics
replicated the same way); what is sized for one shared machine is memory (small heaps),
threads and how fast a dead broker is noticed (``broker.session.timeout.ms`` 4 s instead
of 9 s), so failover tests and demos do not wait for production timeouts.

The controller is one process: a quorum of one is the cheapest start-up and the brokers'
failover, which is what the cluster is for, does not depend on it. Killing the
controller is not a supported scenario.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from headrace.cluster.errors import ClusterError
from headrace.cluster.process import NodeProcess
from headrace.testing import free_port, kafka_java_command, scaled

READY_MARKER = "Kafka Server started"
STATE_FILE = "kafka-cluster.json"
CONTROLLER_ID = 0

# Threads and buffers sized for a 2-core machine shared with Spark; Kafka's defaults
# (8 I/O threads, 3 network threads per listener, 10 background threads) are for servers.
_SMALL_MACHINE = {
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.replica.fetchers": "1",
    "log.cleaner.threads": "1",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.dedupe.buffer.size": "8388608",
}
# A killed broker is fenced (and leaves every ISR) after this long without a heartbeat.
_FAST_FAILOVER = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
}


def _kafka_uuid() -> str:
    """A random Kafka ``Uuid`` as Kafka prints it (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _props_text(props: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


class KafkaCluster:
    """Apache Kafka in KRaft mode: controller ``0`` and brokers ``1..brokers``.

    ``with KafkaCluster() as c: ... c.bootstrap_servers`` (every broker's address, comma
    separated). ``configs`` are extra settings of every node by Kafka's names, on top of the
    cluster's (``replication_factor`` -> ``default.replication.factor`` and the internal
    topics', ``min_insync_replicas`` -> ``min.insync.replicas`` and the transaction log's).
    ``data_dir``: where each node keeps its logs, properties and output (``<dir>/broker-1/
    out.log``); a fresh temporary directory, removed on exit, when not given. ``heap``:
    each broker's ``-Xmx``; the controller gets ``controller_heap``.

    ``start()`` blocks until every broker is registered and unfenced (~10-20 s on two
    cores). ``kill(id)`` SIGKILLs one broker, ``start_broker(id)`` restarts it on the same
    data; ``leader``/``wait_for_isr`` answer from the cluster's own metadata.
    Raises ``ClusterError``, or ``headrace.jvm.JvmUnavailableError`` without the jars.
    """

    def __init__(self, brokers: int = 3, replication_factor: int = 3,
                 min_insync_replicas: int = 2, configs: Mapping[str, str] | None = None,
                 data_dir: str | Path | None = None, host: str = "127.0.0.1",
                 heap: str = "320m", controller_heap: str = "192m",
                 fast_jvm: bool = True, start_timeout: float = 120.0) -> None:
        if brokers < 1 or not 1 <= replication_factor <= brokers:
            raise ClusterError(f"a replication factor of {replication_factor} needs at least "
                               f"that many brokers (asked for {brokers})")
        if not 1 <= min_insync_replicas <= replication_factor:
            raise ClusterError(f"min.insync.replicas {min_insync_replicas} must be between 1 "
                               f"and the replication factor {replication_factor}")
        self.broker_ids = list(range(1, brokers + 1))
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self.configs = dict(configs or {})
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(
            prefix="headrace-kafka-cluster-"))
        self.host = host
        self.heap = heap
        self.controller_heap = controller_heap
        self.fast_jvm = fast_jvm
        self.start_timeout = start_timeout
        self.ports: dict[int, int] = {}
        self.nodes: dict[int, NodeProcess] = {}
        self._load_or_pick_ports()

    # -- addresses ---------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """Every broker's ``host:port``, comma separated (clients need only one alive)."""
        return ",".join(self.address(b) for b in self.broker_ids)

    def address(self, broker_id: int) -> str:
        return f"{self.host}:{self.ports[broker_id]}"

    def _state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    def _load_or_pick_ports(self) -> None:
        """The ports of a cluster started before in ``data_dir`` (its state file), so a
        restart keeps its addresses; else free ones."""
        path = self._state_path()
        if path.exists():
            try:
                state = json.loads(path.read_text())
                self.ports = {int(k): int(v) for k, v in state["ports"].items()}
                self.broker_ids = [int(b) for b in state["brokers"]]
                self.host = str(state["host"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise ClusterError(f"damaged cluster state {path}: {e}") from e
            return
        self.ports = {node: free_port(self.host) for node in [CONTROLLER_ID, *self.broker_ids]}

    def _save_state(self) -> None:
        state = {"host": self.host, "brokers": self.broker_ids,
                 "ports": {str(k): v for k, v in self.ports.items()},
                 "pids": {str(k): n.pid for k, n in self.nodes.items()},
                 "tags": {str(k): n.tag for k, n in self.nodes.items()}}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._state_path().write_text(json.dumps(state, indent=2) + "\n")

    # -- configuration -----------------------------------------------------------------

    def _node_dir(self, node: int) -> Path:
        return self.data_dir / ("controller-0" if node == CONTROLLER_ID else f"broker-{node}")

    def _properties(self, node: int) -> dict[str, str]:
        controller = f"{self.host}:{self.ports[CONTROLLER_ID]}"
        common = {
            "node.id": str(node),
            "controller.quorum.voters": f"{CONTROLLER_ID}@{controller}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self._node_dir(node) / "logs"),
            **_FAST_FAILOVER,
        }
        rf, isr = str(self.replication_factor), str(self.min_insync_replicas)
        # In KRaft the controller creates topics: a CreateTopics without a replication
        # factor or partition count (-1) gets the controller's defaults, so the durable
        # topic defaults go to every node.
        topic_defaults = {
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "unclean.leader.election.enable": "false",
        }
        if node == CONTROLLER_ID:
            return {**common, "process.roles": "controller",
                    "listeners": f"CONTROLLER://{controller}", **topic_defaults,
                    **self.configs}
        return {
            **common,
            "process.roles": "broker",
            "listeners": f"PLAINTEXT://{self.address(node)}",
            "advertised.listeners": f"PLAINTEXT://{self.address(node)}",
            "inter.broker.listener.name": "PLAINTEXT",
            **topic_defaults,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "6",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "transaction.state.log.num.partitions": "6",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "group.initial.rebalance.delay.ms": "0",
            "group.consumer.min.heartbeat.interval.ms": "500",
            "group.consumer.heartbeat.interval.ms": "500",
            **_SMALL_MACHINE,
            **self.configs,
        }

    def _jvm_options(self, node: int) -> list[str]:
        heap = self.controller_heap if node == CONTROLLER_ID else self.heap
        options = [f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
        if self.fast_jvm:
            # C1 only: each JVM starts seconds sooner on two cores; peak speed is lower,
            # which benchmarks avoid by passing fast_jvm=False.
            options.append("-XX:TieredStopAtLevel=1")
        return options

    def _make_node(self, node: int) -> NodeProcess:
        props = self._node_dir(node) / "server.properties"
        cmd = kafka_java_command("kafka.Kafka", str(props), jvm_options=self._jvm_options(node))
        name = "controller" if node == CONTROLLER_ID else f"broker {node}"
        return NodeProcess(name, cmd, self._node_dir(node) / "out.log", str(props))

    def _format(self, nodes: Iterable[int]) -> None:
        """Write each node's properties and format the storage of those not formatted yet,
        all with one cluster id.

        Kafka's ``StorageTool`` formats the controller; a broker's formatted directory is
        the same ``bootstrap.checkpoint`` plus a ``meta.properties`` naming the node and a
        fresh directory id, which is written here rather than by three more JVM starts
        (~2 s each, in parallel ~8 s on two cores)."""
        for node in [CONTROLLER_ID, *self.broker_ids]:
            self._node_dir(node).mkdir(parents=True, exist_ok=True)
            (self._node_dir(node) / "server.properties").write_text(
                _props_text(self._properties(node)))
        todo = [n for n in nodes if not (self._node_dir(n) / "logs" / "meta.properties").exists()]
        if not todo:
            return
        id_file = self.data_dir / "cluster.id"
        if not id_file.exists():
            id_file.write_text(_kafka_uuid() + "\n")
        cluster_id = id_file.read_text().strip()
        controller_logs = self._node_dir(CONTROLLER_ID) / "logs"
        checkpoint = controller_logs / "bootstrap.checkpoint"
        if CONTROLLER_ID in todo or not checkpoint.exists():
            cmd = kafka_java_command(
                # the "=" form: a random id may start with "-", which the tool would parse
                # as an option
                "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                "--ignore-formatted", "-c",
                str(self._node_dir(CONTROLLER_ID) / "server.properties"),
                jvm_options=["-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(120),
                                  check=False)
            if done.returncode != 0:
                raise ClusterError(f"formatting the controller's storage failed:\n"
                                   f"{done.stdout}{done.stderr}")
        for node in todo:
            if node == CONTROLLER_ID:
                continue
            logs = self._node_dir(node) / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(checkpoint, logs / "bootstrap.checkpoint")
            (logs / "meta.properties").write_text(_props_text({
                "node.id": str(node), "directory.id": _kafka_uuid(), "version": "1",
                "cluster.id": cluster_id}))

    # -- life cycle --------------------------------------------------------------------

    def start(self, detach: bool = False) -> KafkaCluster:
        """Format (first start), start the controller and every broker, and wait until all
        brokers serve. Blocks. ``detach``: the JVMs outlive this process (``headrace
        cluster up``); ``attach`` finds them again from the state file."""
        nodes = [CONTROLLER_ID, *self.broker_ids]
        self._format(nodes)
        for node in nodes:
            self.nodes[node] = self._make_node(node)
        try:
            for node in nodes:
                self.nodes[node].start(detach)
            self._save_state()
            for node in nodes:
                self.nodes[node].wait_ready(READY_MARKER, self.start_timeout)
            self.wait_for_brokers()
        except BaseException:
            self.stop()
            raise
        return self

    @classmethod
    def attach(cls, data_dir: str | Path) -> KafkaCluster:
        """The cluster whose state is in ``data_dir``, as ``start(detach=True)`` left it:
        its processes adopted by pid (those no longer running stay dead)."""
        path = Path(data_dir) / STATE_FILE
        if not path.exists():
            raise ClusterError(f"no Kafka cluster in {data_dir} (no {STATE_FILE})")
        cluster = cls(data_dir=data_dir)
        cluster._own_dir = False
        state = json.loads(path.read_text())
        for key, pid in state.get("pids", {}).items():
            node = cluster._make_node(int(key))
            node.adopt(int(pid))
            cluster.nodes[int(key)] = node
        return cluster

    def kill(self, broker_id: int) -> None:
        """SIGKILL broker ``broker_id`` (no controlled shutdown: its leaderships move only
        when the controller notices it gone, after ``broker.session.timeout.ms``)."""
        self._node(broker_id).kill()

    def stop_broker(self, broker_id: int) -> None:
        """Controlled shutdown of one broker (its leaderships move first)."""
        self._node(broker_id).stop()

    def start_broker(self, broker_id: int, wait: bool = True) -> None:
        """Start a stopped or killed broker again on its data and port (log recovery runs
        after a kill). With ``wait``, blocks until it is registered and unfenced."""
        node = self._node(broker_id)
        node.start()
        self._save_state()
        if wait:
            node.wait_ready(READY_MARKER, self.start_timeout)
            self.wait_for_brokers()

    def running(self, node: int) -> bool:
        return node in self.nodes and self.nodes[node].alive()

    def stop(self) -> None:
        """Stop the brokers (in parallel, cleanly: SIGTERM, SIGKILL after 30 s), then the
        controller. Idempotent; the data directory stays unless it was a temporary one
        and the cluster is used as a context manager."""
        brokers = [n for k, n in self.nodes.items() if k != CONTROLLER_ID]
        with ThreadPoolExecutor(max(1, len(brokers))) as pool:
            list(pool.map(lambda n: n.stop(), brokers))
        if CONTROLLER_ID in self.nodes:
            self.nodes[CONTROLLER_ID].stop()

    def _node(self, broker_id: int) -> NodeProcess:
        if broker_id not in self.broker_ids or broker_id not in self.nodes:
            raise ClusterError(f"no broker {broker_id} (brokers: {self.broker_ids})")
        return self.nodes[broker_id]

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- questions to the cluster ------------------------------------------------------

    def admin(self) -> AdminClient:
        """An admin client on every live broker's address."""
        alive = [b for b in self.broker_ids if self.running(b)] or self.broker_ids
        return AdminClient({"bootstrap.servers": ",".join(self.address(b) for b in alive),
                            "log_level": 4})

    def live_brokers(self, timeout: float = 10.0) -> list[int]:
        """The broker ids the cluster's metadata lists now (registered and unfenced)."""
        try:
            meta = self.admin().list_topics(timeout=scaled(timeout))
        except KafkaException as e:
            raise ClusterError(f"no broker answers: {e}") from e
        return sorted(meta.brokers)

    def wait_for_brokers(self, timeout: float = 60.0) -> None:
        """Block until the metadata lists exactly the running brokers."""
        deadline = time.monotonic() + scaled(timeout)
        want = [b for b in self.broker_ids if self.running(b)]
        while True:
            try:
                found = self.live_brokers()
            except ClusterError:
                found = []
            if found == want:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"brokers {found} in the metadata, expected {want}")
            time.sleep(0.1)

    def partitions(self, topic: str) -> dict[int, Any]:
        """Partition id -> confluent-kafka ``PartitionMetadata`` (``leader``,
        ``replicas``, ``isrs``) as a live broker reports it now."""
        try:
            meta = self.admin().list_topics(topic, timeout=scaled(10))
        except KafkaException as e:
            raise ClusterError(f"metadata of {topic}: {e}") from e
        found = meta.topics.get(topic)
        if found is None or found.error is not None:
            raise ClusterError(f"no topic {topic}: {found.error if found else 'not listed'}")
        return dict(found.partitions)

    def leader(self, topic: str, partition: int = 0) -> int:
        """The broker leading ``topic``/``partition`` now (-1: none)."""
        return int(self.partitions(topic)[partition].leader)

    def wait_for_leader(self, topic: str, partition: int = 0, not_on: int | None = None,
                        timeout: float = 60.0) -> int:
        """Block until the partition has a leader (other than ``not_on``); return it."""
        deadline = time.monotonic() + scaled(timeout)
        while True:
            try:
                leader = self.leader(topic, partition)
            except ClusterError:
                leader = -1
            if leader >= 0 and leader != not_on:
                return leader
            if time.monotonic() > deadline:
                raise ClusterError(f"{topic}/{partition} has no leader but {not_on} "
                                   f"after {scaled(timeout):g} s")
            time.sleep(0.1)

    def wait_for_isr(self, topics: Iterable[str] | None = None, timeout: float = 90.0) -> None:
        """Block until every partition of ``topics`` (default: every topic, internal ones
        included) has a leader and all its replicas in sync: the cluster has healed."""
        deadline = time.monotonic() + scaled(timeout)
        wanted = set(topics) if topics is not None else None
        while True:
            lagging: list[str] = []
            try:
                meta = self.admin().list_topics(timeout=scaled(10))
                for name, t in meta.topics.items():
                    if wanted is not None and name not in wanted:
                        continue
                    if t.error is not None:
                        lagging.append(f"{name}: {t.error}")
                    lagging += [f"{name}/{p.id} isr {sorted(p.isrs)} of {sorted(p.replicas)}"
                                for p in t.partitions.values()
                                if p.leader < 0 or set(p.isrs) != set(p.replicas)]
                if wanted is not None:
                    lagging += [f"{name}: not listed" for name in wanted - set(meta.topics)]
            except KafkaException as e:
                lagging.append(str(e))
            if not lagging:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"replicas not in sync after {scaled(timeout):g} s: "
                                   + "; ".join(lagging[:5]))
            time.sleep(0.2)
