"""A Spark standalone cluster on this machine: a master and N workers, from PySpark's jars.

Each is ``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker`` of the
installed ``pyspark`` (its ``bin/spark-class`` and ``jars/``), so nothing beyond ``pip
install pyspark`` is needed. Applications connect with ``SparkSession.builder
.master(cluster.master_url)``; their executors are separate JVMs the workers launch,
running this interpreter's Python workers (``PYSPARK_PYTHON`` is passed on).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import TracebackType

from headrace import jvm
from headrace.cluster.errors import ClusterError
from headrace.cluster.process import NodeProcess
from headrace.testing import free_port

STATE_FILE = "spark-cluster.json"
MASTER_READY = "I have been elected leader"
WORKER_READY = "Successfully registered with master"


class SparkCluster:
    """A master on ``master_url`` (``spark://host:port``) and ``workers`` workers, each
    offering ``worker_cores`` cores (task slots, not CPUs: 4 by default, since a Real-Time
    Mode query needs one per task of its stages at once) and ``worker_memory`` to
    executors. The daemons themselves run with ``daemon_memory`` heaps. ``start()`` blocks
    until every worker has registered (~5-10 s). ``kill_worker(i)`` SIGKILLs worker ``i``
    (its executors die with it); ``start_worker(i)`` brings it back. Raises
    ``ClusterError``."""

    def __init__(self, workers: int = 2, worker_cores: int = 4, worker_memory: str = "1g",
                 daemon_memory: str = "256m", data_dir: str | Path | None = None,
                 host: str = "127.0.0.1", start_timeout: float = 90.0) -> None:
        self.worker_count = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(
            prefix="headrace-spark-cluster-"))
        self.host = host
        self.start_timeout = start_timeout
        self.port = 0
        self.master: NodeProcess | None = None
        self.workers: list[NodeProcess] = []

    @property
    def master_url(self) -> str:
        if not self.port:
            raise ClusterError("the Spark master is not started")
        return f"spark://{self.host}:{self.port}"

    @staticmethod
    def spark_home() -> Path:
        # imported here: the ``headrace`` command imports this module for ``headrace
        # cluster``, and pyspark's import would slow every other command's start
        import pyspark

        return Path(pyspark.__file__).resolve().parent

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(self.spark_home()),
                "SPARK_DAEMON_MEMORY": self.daemon_memory, "SPARK_LOCAL_IP": self.host,
                # the master and workers do little work: C1 and the serial collector start
                # them sooner and keep them small; then headrace's options for every JVM
                "SPARK_DAEMON_JAVA_OPTS": " ".join(["-XX:TieredStopAtLevel=1",
                                                    "-XX:+UseSerialGC", *jvm.extra_options()]),
                "SPARK_NO_DAEMONIZE": "1",
                "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}

    def _spark_class(self, main: str, *args: str) -> list[str]:
        return [str(self.spark_home() / "bin" / "spark-class"), main, *args]

    def _master_node(self) -> NodeProcess:
        master_dir = self.data_dir / "master"
        return NodeProcess(
            "Spark master",
            self._spark_class("org.apache.spark.deploy.master.Master", "--host", self.host,
                              "--port", str(self.port), "--webui-port", "0",
                              "--properties-file", str(self._properties(master_dir))),
            master_dir / "out.log", str(master_dir), self._env())

    def _worker_node(self, i: int) -> NodeProcess:
        work = self.data_dir / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        return NodeProcess(
            f"Spark worker {i}",
            self._spark_class("org.apache.spark.deploy.worker.Worker", "--host", self.host,
                              "--cores", str(self.worker_cores), "--memory",
                              self.worker_memory, "--webui-port", "0", "--work-dir", str(work),
                              self.master_url),
            work / "out.log", str(work), self._env())

    def _properties(self, master_dir: Path) -> Path:
        """The master's settings file; the UI's port 0 picks a free one."""
        master_dir.mkdir(parents=True, exist_ok=True)
        path = master_dir / "spark.properties"
        path.write_text("spark.ui.enabled=false\nspark.master.rest.enabled=false\n")
        return path

    def start(self, detach: bool = False) -> SparkCluster:
        """Start the master, then the workers; block until every worker registered.
        ``detach``: the daemons outlive this process (``headrace cluster up``)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(self.host)
        self.master = self._master_node()
        try:
            self.master.start(detach)
            self._save_state()
            self.master.wait_ready(MASTER_READY, self.start_timeout)
            self.workers = [self._worker_node(i) for i in range(1, self.worker_count + 1)]
            for w in self.workers:
                w.start(detach)
            self._save_state()
            for w in self.workers:
                w.wait_ready(WORKER_READY, self.start_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` (1-based). Its executors notice and exit."""
        self.workers[i - 1].kill()

    def start_worker(self, i: int) -> None:
        """Start worker ``i`` again; blocks until it registered."""
        w = self.workers[i - 1]
        w.start()
        self._save_state()
        w.wait_ready(WORKER_READY, self.start_timeout)

    def stop(self) -> None:
        """Stop the workers (their executors with them), then the master. Idempotent."""
        for w in self.workers:
            w.stop(15)
        if self.master is not None:
            self.master.stop(15)

    def _save_state(self) -> None:
        state = {"host": self.host, "port": self.port,
                 "master": self.master.pid if self.master else 0,
                 "workers": [w.pid for w in self.workers]}
        (self.data_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def attach(cls, data_dir: str | Path) -> SparkCluster:
        """The cluster ``start(detach=True)`` left in ``data_dir``, its daemons adopted."""
        path = Path(data_dir) / STATE_FILE
        if not path.exists():
            raise ClusterError(f"no Spark cluster in {data_dir} (no {STATE_FILE})")
        try:
            state = json.loads(path.read_text())
            cluster = cls(workers=len(state["workers"]), data_dir=data_dir,
                          host=str(state["host"]))
            cluster.port = int(state["port"])
        except (ValueError, KeyError, TypeError) as e:
            raise ClusterError(f"damaged cluster state {path}: {e}") from e
        cluster._own_dir = False
        cluster.master = cluster._master_node()
        cluster.master.adopt(int(state["master"]))
        cluster.workers = []
        for i, pid in enumerate(state["workers"], start=1):
            w = cluster._worker_node(i)
            w.adopt(int(pid))
            cluster.workers.append(w)
        return cluster

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
