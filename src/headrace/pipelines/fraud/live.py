"""``headrace demo fraud``: broker, generator and Spark pipelines together, with a live view.

Starts an embedded broker (unless given one), a SparkSession, the generator in real time on
a thread, and a read_committed consumer of the alerts that measures detection latency: the
time an alert becomes readable minus its transaction's event time. Two engines:

- ``realtime`` (the default): the real-time path (``realtime.py``: Spark Real-Time Mode,
  rules on the JVM operator) writes ``fraud-alerts``; beside it the micro-batch pipeline
  (``pipeline.py``) keeps the late-data side output and the dead letters and writes its
  own alerts to ``fraud-alerts-microbatch``, which checks the real-time path: the summary
  counts the alerts (card, rule) both paths raised and those only one did. The check runs
  in a Spark application of its own at a lower CPU priority (``checker.py``): the real-time
  path comes first, the check may lag while traffic flows and catches up after it; above
  ``CHECK_LIVE_UP_TO`` tx/s it starts only when the traffic stops. (In
  one session the two also fought for task slots: a Real-Time Mode batch needs all its
  slots free at once and failed with ``CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT`` when the
  micro-batch query's tasks held some at a checkpoint boundary.)
- ``microbatch``: today's micro-batch pipeline alone (alerts to ``fraud-alerts``).

Before the measured traffic the real-time path is warmed up with a few seconds of traffic
at the run's rate and a few alerts, all on cards outside the run (``live_warmup``: the first
seconds of a cold path were the run's slowest); the demo says so and keeps them out of every
figure.

When the real-time path's JVM pieces are missing (no Maven Central at setup), the demo says
so once and runs the micro-batch engine. The terminal view (rich) refreshes twice a second;
at the end the generator stops, the pipelines drain, and a summary with precision, recall,
latency percentiles and the check is printed. Topics stay for ``headrace consume``.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.live import Live

from headrace.pipelines.errors import PipelineError
from headrace.pipelines.fraud import avro, profiles_db, realtime
from headrace.pipelines.fraud.checker import CheckerProcess, CheckerSettings
from headrace.pipelines.fraud.config import FraudConfig
from headrace.pipelines.fraud.generator import FraudTopics, run
from headrace.pipelines.fraud.live_follow import (
    drain,
    end_offset,
    read_up_to,
    tick,
    watch_alerts,
)
from headrace.pipelines.fraud.live_view import LiveState, LiveSummary, percentile, view
from headrace.pipelines.fraud.live_warmup import WARMUP_CARDS, WARMUP_SECONDS, warm_up
from headrace.pipelines.fraud.load import run_parallel, shard_configs
from headrace.pipelines.fraud.pipeline import PipelineConfig, PipelineTopics, start
from headrace.pipelines.fraud.stream import FraudGenerator
from headrace.pipelines.fraud.truth import GroundTruth
from headrace.realtime import local_counters

Engine = Literal["realtime", "microbatch"]
CHECK_ALERTS_TOPIC = "fraud-alerts-microbatch"
CHECK_LIVE_UP_TO = 1000.0
"""tx/s up to which the check runs while the traffic flows."""
GC_OPTIONS = "-XX:G1HeapRegionSize=8m"
"""The demo's Spark JVM: with G1's default 1 MB regions on its 2 GB heap, objects of 512 KB
and more are humongous objects, and at 5,000 tx/s they started a concurrent marking cycle
every 1-3 s, each with a 20-80 ms remark pause that alerts wait behind; with 8 MB regions
(measured in one run each, BENCHMARKS.md) GC pauses over 20 ms fell from 29 to 10."""


@dataclass(frozen=True)
class LiveSettings:
    rate: float = 200.0
    duration_s: float = 40.0
    seed: int = 7
    bootstrap_servers: str | None = None
    checkpoint: str | None = None
    drain_timeout_s: float = 120.0
    steady_after_s: float = 0.0
    """Latency counts only alerts on transactions this long after the stream started (the
    first micro-batch also loads every profile; benchmarks skip that warm-up)."""
    topics: PipelineTopics = field(default_factory=PipelineTopics)
    engine: Engine = "realtime"
    check: bool = True
    """realtime engine: run the micro-batch pipeline beside it (late side output, dead
    letters, and the check of every real-time alert)."""
    network_delay_ms: tuple[float, float] = (5.0, 20.0)
    """Simulated card-terminal-to-broker delay (median, p99), part of detection latency."""
    checkpoint_interval: str = "5 minutes"
    """realtime engine: Real-Time Mode's checkpoint period (``RealtimeConfig``; Spark's
    default). Each checkpoint boundary delays the alerts of a few seconds."""
    exactly_once: bool = True
    """realtime engine: alerts through the exactly-once sink (False: Spark's Kafka sink,
    at-least-once; benchmarks compare the two)."""
    incidents_per_min: float = 10.0
    """Injected incidents of each of the four patterns per minute of traffic."""
    schema_registry_url: str | None = None
    """Transactions go out as Avro through this registry. None: an embedded run starts a
    registry beside its broker; a run on an external cluster without one sends JSON."""
    web_console: bool = True
    """Run ``headrace console`` beside the demo (its URL is printed), with the pipelines'
    metrics plotted live."""
    generator_processes: int = 0
    """Processes the generator runs in (``load.py``: shards with disjoint cards), for rates
    the demo's own process cannot produce beside its other work; 0: one per 2,500 tx/s
    (``generator_processes_for``)."""
    postgres_dsn: str | None = None
    """User profiles live in this PostgreSQL database's ``users`` table and reach the log
    through CDC. None: an embedded run starts a throwaway PostgreSQL (falling back to the
    generator's profile topic when it can't); an external run uses the profile topic."""


def generator_processes_for(rate: float) -> int:
    """The demo's generator processes at ``rate`` tx/s: one per 2,500 (a Python process
    sharing the machine with the pipelines keeps that with room to spare), 1 to 8."""
    return min(max(math.ceil(rate / 2500), 1), 8)


def realtime_unavailable() -> str | None:
    """Why the real-time path cannot run here (its jars were not built), or None."""
    from headrace.spark.session import kafka_connector_jars, realtime_jars

    if not kafka_connector_jars():
        return "Spark's Kafka connector (jvm/lib/spark-kafka) was not built"
    if not realtime_jars():
        return "the real-time rule operator (jvm/lib/realtime) was not built"
    return None


def _spark(log: Console, master: str, checkpoint: str) -> Any:
    from headrace.spark.session import local_session

    jvm_log = f"{checkpoint}/spark.log"
    log.print(f"starting Spark ({master}); its log: {jvm_log} ...")
    return local_session("headrace-fraud", master=master, jvm_log=jvm_log,
                         java_options=GC_OPTIONS)


def _web_console(settings: LiveSettings, bootstrap: str, spark: Any, console: Console,
                 more_metrics: list[str]) -> Any:
    """Start ``headrace console`` on the demo's cluster, its pipeline page fed by the
    session's query progress and ``more_metrics`` (the check's); None (and a note) if it
    cannot start."""
    if not settings.web_console:
        return None
    from headrace.spark.metrics import serve_pipeline_metrics
    from headrace.testing import ConsoleProcess, EmbeddedBrokerError

    _listener, metrics_url = serve_pipeline_metrics(
        spark, dead_letter_topics={"fraud": settings.topics.dead_letters},
        bootstrap_servers=bootstrap)
    try:
        web = ConsoleProcess(bootstrap, settings.schema_registry_url or "",
                             [metrics_url, *more_metrics],
                             sample_seconds=2.0).start()
    except (EmbeddedBrokerError, OSError) as e:
        console.print(f"[yellow]the web console could not start: {e}[/]")
        return None
    console.print(f"web console on {web.url}/ (topics, groups and lag, the pipelines live)")
    return web


def _ensure_output_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    # Once each: librdkafka cannot parse the answer to a request naming a topic twice.
    futures = admin.create_topics([NewTopic(t, num_partitions=1) for t in dict.fromkeys(names)])
    for name, f in futures.items():
        try:
            f.result(30)
        except Exception as e:  # an existing topic is fine; anything else is not
            if getattr(e.args[0], "code", lambda: None)() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise PipelineError(f"cannot create topic {name}: {e}") from e


def run_live(settings: LiveSettings, console: Console | None = None) -> LiveSummary:
    """Run the demo end to end. Blocks for about ``duration_s`` plus start-up and drain."""
    from headrace.testing import (
        EmbeddedBroker,
        EmbeddedBrokerError,
        PostgresServer,
        SchemaRegistryProcess,
    )

    console = console or Console(stderr=True)
    if settings.engine == "realtime" and (why := realtime_unavailable()):
        console.print(f"[yellow]real-time path unavailable: {why} (run `make setup` with "
                      "Maven Central reachable); running the micro-batch pipeline[/]")
        settings = replace(settings, engine="microbatch")
    broker: Any = None
    registry: Any = None
    database: Any = None
    bootstrap = settings.bootstrap_servers
    try:
        if bootstrap is None:
            broker = EmbeddedBroker().start()
            bootstrap = broker.bootstrap_servers
            console.print(f"embedded broker on {bootstrap}")
            if settings.schema_registry_url is None:
                registry = SchemaRegistryProcess(bootstrap).start()
                settings = replace(settings, schema_registry_url=registry.url)
                console.print(f"schema registry on {registry.url}")
            if settings.postgres_dsn is None:
                try:
                    database = PostgresServer().start()
                    settings = replace(settings, postgres_dsn=database.dsn)
                    console.print(f"PostgreSQL on {database.host}:{database.port} (user "
                                  "profiles, captured into the log by CDC)")
                except (EmbeddedBrokerError, OSError, subprocess.SubprocessError) as e:
                    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    console.print(f"[yellow]PostgreSQL could not start ({first}); user "
                                  "profiles come from the generator's topic instead[/]")
        summary = _run(settings, bootstrap, console)
        # The embedded broker stops below; its data directory stays (the summary says
        # how to read it).
        if broker is not None:
            return replace(summary, data_dir=str(broker.data_dir))
        return replace(summary, bootstrap_servers=bootstrap)
    finally:
        for process in (registry, broker, database):
            if process is not None:
                process.stop()


class _ProfileCapture:
    """The ``users`` table and a CDC connector (in a thread) streaming it into the log."""

    def __init__(self, dsn: str, bootstrap: str) -> None:
        from headrace.cdc.connector import CdcConfig, Connector

        self.table = profiles_db.ProfileTable(dsn)
        self.topic = f"fraud.{profiles_db.TABLE}"
        self.stop = threading.Event()
        ready = threading.Event()
        failure: list[BaseException] = []
        connector = Connector(CdcConfig(dsn, (profiles_db.TABLE,), bootstrap,
                                        topic_prefix="fraud", slot="fraud_profiles",
                                        publication="fraud_profiles", heartbeat_s=1.0))

        def capture() -> None:
            try:
                connector.run(self.stop, on_ready=lambda _lsn: ready.set())
            except Exception as e:  # reported to the demo's thread, which fails loudly
                failure.append(e)
                ready.set()

        self.thread = threading.Thread(target=capture, name="cdc", daemon=True)
        self.thread.start()
        if not ready.wait(60) or failure:
            raise PipelineError(f"the CDC connector did not start: {failure or 'timeout'}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.table.close()


def _run(settings: LiveSettings, bootstrap: str, console: Console) -> LiveSummary:
    checkpoint = settings.checkpoint or tempfile.mkdtemp(prefix="headrace-fraud-cp-")
    rt = settings.engine == "realtime"
    median, p99 = settings.network_delay_ms
    probe = FraudConfig(seed=settings.seed, rate=settings.rate, duration_s=settings.duration_s,
                        velocity_bursts=settings.incidents_per_min,
                        impossible_travel=settings.incidents_per_min,
                        amount_anomalies=settings.incidents_per_min,
                        card_testing=settings.incidents_per_min)
    config = FraudConfig(seed=settings.seed, rate=settings.rate,
                         duration_s=settings.duration_s, users=probe.required_users(),
                         late_after_s=10.0, delay_median_ms=median, delay_p99_ms=p99,
                         velocity_bursts=settings.incidents_per_min,
                         impossible_travel=settings.incidents_per_min,
                         amount_anomalies=settings.incidents_per_min,
                         card_testing=settings.incidents_per_min)
    topics = settings.topics
    capture = None
    if settings.postgres_dsn:
        capture = _ProfileCapture(settings.postgres_dsn, bootstrap)
        topics = replace(topics, profiles=capture.topic)
        console.print(f"user profiles: PostgreSQL table {profiles_db.TABLE} -> CDC -> "
                      f"{capture.topic}")
    envelope = "debezium" if capture else ""
    # the checking micro-batch path writes its own alerts and dead letters (the real-time
    # path dead-letters malformed transactions too)
    mb_topics = replace(topics, alerts=CHECK_ALERTS_TOPIC,
                        dead_letters=f"{topics.dead_letters}-check") if rt else topics
    checker = None
    # Above CHECK_LIVE_UP_TO tx/s the check starts when the traffic stops: the micro-batch
    # pipeline cannot keep up with it anyway (about 2k tx/s on 2 cores), and while it tried
    # it would take CPU from the real-time path even at a lower priority.
    check_after = settings.rate > CHECK_LIVE_UP_TO
    if rt and settings.check:  # its JVM starts while the real-time path's does
        checker = CheckerProcess(CheckerSettings(
            bootstrap, f"{checkpoint}/microbatch", topics=mb_topics,
            schema_registry_url=settings.schema_registry_url or "",
            profiles_envelope=envelope, rate=settings.rate,
            jvm_log=f"{checkpoint}/spark-check.log")).spawn()
    # Real-Time Mode holds a task slot per source partition (4 + 1) and shuffle partition
    # (2) for the whole run, and needs them all free at each checkpoint boundary: its
    # session runs nothing else.
    try:
        spark = _spark(console, "local[8]" if rt else "local[2]", checkpoint)
    except BaseException:
        if checker is not None:
            checker.stop()
        raise
    if checker is not None:
        console.print(f"the check (micro-batch pipeline) in a Spark application of its own "
                      f"at nice {checker.settings.nice}"
                      + (", once the traffic has stopped" if check_after else "")
                      + f"; its log: {checker.settings.jvm_log}")
    web = _web_console(settings, bootstrap, spark, console,
                       [checker.metrics_url] if checker is not None else [])
    _ensure_output_topics(bootstrap, [topics.alerts, mb_topics.alerts, topics.late,
                                      topics.dead_letters, mb_topics.dead_letters])
    processes = settings.generator_processes or generator_processes_for(settings.rate)
    parallel = processes > 1
    # one process: the generator here (the live view scores against its truth as it goes)
    generator, cards_box = None, []
    if not parallel:
        generator = FraudGenerator(config)
        cards_box.append(len(generator.world.cards))
    users = (sum(c.users for c in shard_configs(config, processes))
             if parallel else config.users)
    state = LiveState()
    stop = threading.Event()
    gen_topics = FraudTopics(transactions=topics.transactions, profiles=topics.profiles)
    truth_box: list[GroundTruth] = []
    queries: list[Any] = []
    profiles_in, go = threading.Event(), threading.Event()

    def profiles_loaded() -> None:
        if capture is not None:  # wait until CDC has brought them into the log
            deadline = time.monotonic() + settings.drain_timeout_s
            while (end_offset(bootstrap, topics.profiles) < users
                   and time.monotonic() < deadline):
                time.sleep(0.2)
        profiles_in.set()
        go.wait()

    encoder = None
    if settings.schema_registry_url:
        encoder = avro.register(settings.schema_registry_url, topics.transactions)
        console.print(f"transactions as Avro: schema id {encoder.schema_id} "
                      f"(subject {topics.transactions}-value)")

    def generate_in_shards() -> None:
        def loaded(cards: int) -> None:
            cards_box.append(cards)
            profiles_loaded()

        truth_box.append(run_parallel(
            bootstrap, config, processes, topics=gen_topics,
            before_stream=loaded, on_progress=lambda n: setattr(state, "sent", n),
            registry_url=settings.schema_registry_url or "" if encoder else "",
            postgres_dsn=settings.postgres_dsn or "" if capture else "").truth)
        state.stream_ended = time.monotonic()

    def generate() -> None:
        truth_box.append(run(bootstrap, generator=generator, topics=gen_topics,
                             before_stream=profiles_loaded, stop=stop,
                             on_progress=lambda n, _t: setattr(state, "sent", n),
                             encode_transaction=encoder.encode if encoder else None,
                             profile_sink=capture.table.write if capture else None))
        state.stream_ended = time.monotonic()

    failure: list[BaseException] = []

    def generate_or_say_why() -> None:
        try:
            (generate_in_shards if parallel else generate)()
        except BaseException as e:  # raised from the run's thread (generator_failed)
            failure.append(e)

    def generator_failed(when: str) -> PipelineError:
        error = PipelineError(f"the generator stopped {when}"
                              + (f": {failure[0]}" if failure else ""))
        error.__cause__ = failure[0] if failure else None
        return error

    gen_thread = threading.Thread(target=generate_or_say_why, daemon=True)
    gen_thread.start()
    watcher = threading.Thread(target=watch_alerts, daemon=True, args=(
        bootstrap, topics.alerts, mb_topics.alerts if rt and settings.check else None,
        topics.dead_letters, state, stop))
    watcher.start()
    state.started = time.monotonic()
    mb_query: Any = None
    try:
        # The profiles are in the log: start the queries (from this thread: PySpark finds
        # format("headrace") from the thread that registered it), so the real-time path
        # meets each card's profile before its first transaction.
        console.print(f"publishing {users} user profiles"
                      + (f" from {processes} generator processes"
                         if parallel else "") + " ...")
        while not profiles_in.wait(0.5):
            if not gen_thread.is_alive():
                raise generator_failed("before the transactions")
        console.print("starting the pipelines and loading the profiles into them ...")
        if rt:
            console.print(f"the real-time path checkpoints every {settings.checkpoint_interval}"
                          " (each checkpoint boundary delays alerts for a few seconds)")
            queries.append(realtime.start(spark, realtime.RealtimeConfig(
                bootstrap, f"{checkpoint}/realtime", topics=topics,
                checkpoint_interval=settings.checkpoint_interval,
                exactly_once=settings.exactly_once,
                transaction_schema_id=encoder.schema_id if encoder else None,
                profiles_envelope=envelope)))
        if checker is not None:  # it reads the profiles when it gets the CPU
            if not check_after:
                checker.start_query()
            mb_query = checker
            queries.append(checker)
        elif not rt:
            mb_query = start(spark, PipelineConfig(
                bootstrap, f"{checkpoint}/microbatch", topics=mb_topics, trigger_ms=0,
                schema_registry_url=settings.schema_registry_url or "",
                profiles_envelope=envelope))
            queries.append(mb_query)
            wanted = end_offset(bootstrap, topics.profiles)
            deadline = time.monotonic() + settings.drain_timeout_s
            while time.monotonic() < deadline and read_up_to(mb_query, topics.profiles) < wanted:
                time.sleep(0.2)
        if rt:
            _wait_for_realtime_profiles(spark, cards_box[0],
                                        settings.drain_timeout_s)
            console.print(f"warming up the real-time path: {WARMUP_SECONDS:g} s of payments "
                          f"and {len(WARMUP_CARDS)} alerts on cards outside the run, before "
                          "its traffic (in none of its figures) ...")
            warm_up(bootstrap, topics.transactions, encoder.encode if encoder else None,
                    state, settings.rate, settings.drain_timeout_s)
            console.print(f"warm-up alerts read after {min(state.warmup_ms)}-"
                          f"{max(state.warmup_ms)} ms")
        state.measure_from_ms = time.time() * 1000 + settings.steady_after_s * 1000
        state.phase = "running"
        state.stream_started = time.monotonic()
        state.sent_before_stream = state.sent
        go.set()
        with Live(view(state, settings.engine, settings.rate), console=console,
                  refresh_per_second=2) as live:
            while gen_thread.is_alive() or not truth_box:
                if not gen_thread.is_alive():
                    raise generator_failed("without finishing the run")
                tick(queries, mb_query, state, generator, bootstrap, topics)
                live.update(view(state, settings.engine, settings.rate))
                time.sleep(0.5)
            state.truth = truth_box[0]
            state.phase = "draining"
            if checker is not None and check_after:
                checker.start_query()
            # the check's first batch reads every profile: 1 s per 1,000 may pass without
            # a batch done
            drain(max(settings.drain_timeout_s, users / 1000 if checker else 0.0), queries,
                  mb_query, state, bootstrap, topics,
                   lambda: live.update(view(state, settings.engine, settings.rate)),
                   (lambda: local_counters(spark)) if rt else None)
            state.phase = "done"
            live.update(view(state, settings.engine, settings.rate))
    finally:
        # Stopping a query cancels its running tasks, which Spark reports as ERRORs: expected
        # at shutdown, so not shown.
        spark.sparkContext.setLogLevel("OFF")
        for q in queries:
            q.stop()
        if checker is not None:  # also when it never got its start
            checker.stop()
        if settings.checkpoint is None:
            # a run's own micro-batch checkpoint serves no later run and holds the check's
            # state (about 450 MB at 5,000 tx/s); the logs and the real-time path's
            # checkpoint (under 100 KB) stay beside it
            shutil.rmtree(f"{checkpoint}/microbatch", ignore_errors=True)
        stop.set()
        go.set()
        watcher.join(5)
        if capture is not None:
            capture.close()
        if web is not None:
            web.stop()
    truth = truth_box[0]
    agreement = None
    if rt and mb_query is not None:
        mine = state.keys()
        agreement = (len(mine & state.checked), len(mine - state.checked),
                     len(state.checked - mine))
    return LiveSummary(
        engine=settings.engine, lag_samples=state.lag_samples, events=state.sent,
        alerts=len(state.all_alerts), score=truth.score(state.all_alerts),
        p50_ms=percentile(state.latencies_ms, 0.5),
        p99_ms=percentile(state.latencies_ms, 0.99),
        p999_ms=percentile(state.latencies_ms, 0.999), late=state.late,
        expected_late=truth.late_count if mb_query is not None else 0,
        dead_letters=state.dead_letters,
        expected_dead_letters=truth.malformed_count if mb_query is not None else 0,
        elapsed_s=time.monotonic() - state.started, repeats=state.repeats,
        agreement=agreement, latencies_ms=tuple(state.latencies_ms),
        stages_ms=tuple(state.stages_ms), transactions=truth.total_txns,
        stream_s=state.stream_ended - state.stream_started, profiles_topic=topics.profiles,
        warmup_ms=tuple(state.warmup_ms))


def _wait_for_realtime_profiles(spark: Any, cards: int, timeout_s: float) -> None:
    """Until the real-time query handled a profile row per card (local mode: the
    operator's counters are this JVM's), or ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and local_counters(spark)[0] < cards:
        time.sleep(0.1)
