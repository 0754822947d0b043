"""Shared fixtures: one real broker process per test session, fresh topics per test."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from pyspark.sql import SparkSession

from headrace.spark.session import local_session
from headrace.testing import ApacheKafka, EmbeddedBroker, SchemaRegistryProcess, scaled

pytest_plugins = ["tests.timing"]

# Every JVM the suite starts (its SparkSession and Spark applications, Apache Kafka and its
# tools, Debezium) compiles with C1 only (``headrace.jvm.extra_options``): they live
# seconds to minutes on small data, where C2's compiling costs more CPU than it saves
# (tests/streaming/test_windows.py: 91 -> 71 CPU s). Subprocesses inherit it.
os.environ.setdefault("HEADRACE_JVM_OPTIONS", "-XX:TieredStopAtLevel=1")

# Every process of a run keeps its temporary files in one folder, removed when the run
# ends: Python's ``tempfile`` (TMPDIR) and the JVMs' ``java.io.tmpdir``. The JVMs unpack
# their native libraries there (RocksDB's 15 MB, snappy, lz4) and Spark its block managers
# and ``temporary-*`` checkpoints; a JVM a test kills never removes them, and runs used to
# leave gigabytes in /tmp. The process that loads this first (pytest, or xdist's
# controller) makes the folder; xdist's workers inherit it through the environment.
_RUN_TMPDIR: str | None = None
if "HEADRACE_TEST_TMPDIR" not in os.environ:
    _RUN_TMPDIR = tempfile.mkdtemp(prefix="headrace-tests-")
    os.chmod(_RUN_TMPDIR, 0o1777)  # as /tmp: PostgreSQL runs as its own user, inside it
    os.environ["HEADRACE_TEST_TMPDIR"] = os.environ["TMPDIR"] = _RUN_TMPDIR
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    os.environ["HEADRACE_JVM_OPTIONS"] += f" -Djava.io.tmpdir={_RUN_TMPDIR}"


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the run's temporary folder, in the process that made it."""
    if _RUN_TMPDIR is not None:
        shutil.rmtree(_RUN_TMPDIR, ignore_errors=True)

AnyBroker = EmbeddedBroker | ApacheKafka

# Hypothesis's own clock checks (200 ms per example, "input generation is slow") are
# assertions on wall-clock speed: on a busy machine (three xdist workers, another Spark job)
# they failed properties that hold. Every property test runs without them; a test's own
# @settings still set the rest.
settings.register_profile("headrace", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("headrace")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-timeout's limit (the ini ``timeout`` or a test's ``timeout`` mark) scaled by
    ``HEADRACE_TEST_TIMEOUT_SCALE``, like every other timeout of the suite."""
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        limit = float(marker.args[0]) if marker and marker.args else default
        if limit > 0:
            item.add_marker(pytest.mark.timeout(scaled(limit)), append=False)


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A broker subprocess shared by the whole session (do not kill it; make your own)."""
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(scope="session")
def registry(broker: EmbeddedBroker) -> Iterator[SchemaRegistryProcess]:
    """A schema registry process on the session's broker (use fresh subjects; don't kill it)."""
    with SchemaRegistryProcess(broker.bootstrap_servers) as r:
        yield r


@pytest.fixture(scope="session")
def apache_kafka() -> Iterator[ApacheKafka]:
    """A real Apache Kafka (KRaft, one JVM) shared by the whole session, started on first
    use (~3-10 s). KIP-848 heartbeats every 500 ms (Kafka's default is 5 s), so consumer
    group tests settle quickly. Without ``make setup``'s jars the test fails with
    ``JvmUnavailableError`` (a missing setup step must not pass as a skip)."""
    with ApacheKafka({"group.consumer.min.heartbeat.interval.ms": "500",
                      "group.consumer.heartbeat.interval.ms": "500"}) as k:
        yield k


@pytest.fixture(params=["headrace", "kafka"])
def any_broker(request: pytest.FixtureRequest) -> AnyBroker:
    """Each test using it runs twice: against headrace's broker and against Apache Kafka,
    the proof that the same code moves to a Kafka cluster unchanged."""
    name = "broker" if request.param == "headrace" else "apache_kafka"
    found: AnyBroker = request.getfixturevalue(name)
    return found


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One SparkSession for the whole run (start-up costs ~7 s), with format("headrace")."""
    session = local_session("headrace-tests")
    yield session
    session.stop()
