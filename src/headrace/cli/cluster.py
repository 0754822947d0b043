"""``headrace cluster up|down|status``: a replicated Apache Kafka and a Spark standalone
cluster on this machine, for trying the same pipelines past one broker and ``local[N]``.

``up`` starts both in the background (``headrace.cluster``: a KRaft controller and three
brokers with replication factor 3 and ``min.insync.replicas=2``; a Spark master and two
workers) with their state in ``--dir``, prints the bootstrap servers and the master URL,
and returns. ``status`` reports which processes run and the brokers the cluster lists;
``down`` stops everything ``up`` started there. A second ``up`` on the same directory
restarts the cluster on its data, at the same addresses. ``mirror`` runs MirrorMaker 2 in
the foreground, copying topics and group offsets from one cluster (an embedded broker)
onto another (``headrace.cluster.mirror``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated

import typer

from headrace.cli.terminal import stdout
from headrace.cluster import ClusterError, KafkaCluster, SparkCluster
from headrace.cluster.kafka import STATE_FILE as KAFKA_STATE
from headrace.cluster.mirror import MirrorMaker
from headrace.cluster.spark import STATE_FILE as SPARK_STATE

app = typer.Typer(
    name="cluster",
    help="Start, inspect and stop a local Kafka cluster (3 brokers) and Spark cluster.",
    no_args_is_help=True,
)

StateDir = Annotated[Path, typer.Option(
    "--dir", file_okay=False, envvar="HEADRACE_CLUSTER_DIR", show_envvar=True,
    help="Directory of the clusters' data, logs and state.")]
DEFAULT_DIR = Path(".headrace-cluster")


@app.command("up")
def up(
    state_dir: StateDir = DEFAULT_DIR,
    brokers: Annotated[int, typer.Option(min=1, help="Kafka brokers.")] = 3,
    replication_factor: Annotated[int, typer.Option(
        min=1, help="default.replication.factor (and the internal topics').")] = 3,
    min_insync_replicas: Annotated[int, typer.Option(min=1, help="min.insync.replicas.")] = 2,
    spark_workers: Annotated[int, typer.Option(
        min=0, help="Spark workers (0: no Spark cluster).")] = 2,
    worker_memory: Annotated[str, typer.Option(
        help="Memory each Spark worker offers its executors.")] = "1g",
    worker_cores: Annotated[int, typer.Option(
        min=1, help="Cores each Spark worker offers its executors (task slots, not CPUs: "
        "a Real-Time Mode query needs one per task of its stages at once).")] = 4,
) -> None:
    """Start the clusters in the background; print where they listen."""
    state_dir.mkdir(parents=True, exist_ok=True)
    _refuse_running(state_dir)
    kafka = KafkaCluster(brokers, replication_factor, min_insync_replicas,
                         data_dir=state_dir / "kafka", fast_jvm=False)
    spark = SparkCluster(spark_workers, worker_cores=worker_cores, worker_memory=worker_memory,
                         data_dir=state_dir / "spark") if spark_workers else None
    # The two start side by side (each is mostly JVMs starting); a failure of either
    # stops both.
    with ThreadPoolExecutor(1) as pool:
        spark_started = pool.submit(spark.start, True) if spark else None
        try:
            kafka.start(detach=True)
        except BaseException:
            if spark_started is not None:
                with contextlib.suppress(ClusterError):
                    spark_started.result()
                if spark is not None:
                    spark.stop()
            raise
        try:
            if spark_started is not None:
                spark_started.result()
        except BaseException:
            kafka.stop()
            raise
    stdout.print(f"Kafka bootstrap servers: {kafka.bootstrap_servers}")
    if spark is not None:
        stdout.print(f"Spark master URL: {spark.master_url}")
    stdout.print(f"Stop with: headrace cluster down --dir {state_dir}")


def _refuse_running(state_dir: Path) -> None:
    if (state_dir / "kafka" / KAFKA_STATE).exists():
        kafka = KafkaCluster.attach(state_dir / "kafka")
        if any(kafka.running(n) for n in kafka.nodes):
            raise ClusterError(f"a cluster already runs from {state_dir} "
                               f"(headrace cluster down --dir {state_dir})")


@app.command("status")
def status(state_dir: StateDir = DEFAULT_DIR) -> None:
    """Which processes of the clusters in DIR run, and the brokers Kafka lists."""
    if not (state_dir / "kafka" / KAFKA_STATE).exists():
        raise ClusterError(f"no cluster in {state_dir} (start one: headrace cluster up "
                           f"--dir {state_dir})")
    kafka = KafkaCluster.attach(state_dir / "kafka")
    running = [n for n in kafka.broker_ids if kafka.running(n)]
    controller = "running" if kafka.running(0) else "stopped"
    stdout.print(f"Kafka bootstrap servers: {kafka.bootstrap_servers}")
    stdout.print(f"  controller {controller}; brokers running: "
                 f"{', '.join(map(str, running)) or 'none'} of {len(kafka.broker_ids)}")
    if running:
        try:
            stdout.print(f"  brokers in the cluster's metadata: "
                         f"{', '.join(map(str, kafka.live_brokers(5)))}")
        except ClusterError as e:
            stdout.print(f"  no broker answers: {e}")
    if (state_dir / "spark" / SPARK_STATE).exists():
        spark = SparkCluster.attach(state_dir / "spark")
        master = "running" if spark.master is not None and spark.master.alive() else "stopped"
        workers = sum(w.alive() for w in spark.workers)
        stdout.print(f"Spark master URL: {spark.master_url} ({master}; "
                     f"{workers} of {len(spark.workers)} workers running)")


@app.command("down")
def down(state_dir: StateDir = DEFAULT_DIR) -> None:
    """Stop every process `up` started in DIR (cleanly; the data stays)."""
    found = False
    if (state_dir / "spark" / SPARK_STATE).exists():
        SparkCluster.attach(state_dir / "spark").stop()
        found = True
    if (state_dir / "kafka" / KAFKA_STATE).exists():
        KafkaCluster.attach(state_dir / "kafka").stop()
        found = True
    if not found:
        raise ClusterError(f"no cluster in {state_dir}")
    stdout.print(f"Stopped the clusters of {state_dir}.")


@app.command("mirror")
def mirror(
    source: Annotated[str, typer.Option(
        "--from", help="Bootstrap servers of the cluster to copy from.")],
    target: Annotated[str, typer.Option(
        "--to", help="Bootstrap servers of the cluster to copy onto.")],
    topics: Annotated[str, typer.Option(
        help="Regular expression of the topics to copy.")] = ".*",
    groups: Annotated[str, typer.Option(
        help="Regular expression of the consumer groups whose offsets to translate.")] = ".*",
    interval: Annotated[int, typer.Option(
        min=1, help="Seconds between syncs of topics, configs and group offsets.")] = 5,
    work_dir: Annotated[Path, typer.Option(
        "--dir", file_okay=False, help="Where MirrorMaker's configuration and log go.")]
        = Path(".headrace-mirror"),
) -> None:
    """Copy topics, their configs and group offsets from one cluster onto another with
    MirrorMaker 2, until Ctrl-C (SIGINT) or SIGTERM. Topic names are kept."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    maker = MirrorMaker(source, target, work_dir, topics, groups, interval).start()
    stdout.print(f"mirroring topics {topics!r} and groups {groups!r} from {source} to "
                 f"{target} (MirrorMaker 2, log: {work_dir / 'mm2.log'}); Ctrl-C stops")
    try:
        while not stop.wait(1):
            if not maker.alive():
                raise ClusterError(f"MirrorMaker exited; its log: {work_dir / 'mm2.log'}:\n"
                                   + maker.output()[-2000:])
    finally:
        maker.stop()
    stdout.print("stopped")
