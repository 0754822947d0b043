"""Shared fixtures: one real broker process per test session, fresh topics per test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from headrace.spark import register
from headrace.streaming import configure
from headrace.testing import EmbeddedBroker


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A broker subprocess shared by the whole session (do not kill it; make your own)."""
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"


os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One SparkSession for the whole run (start-up costs ~7 s), with format("headrace")."""
    session = (SparkSession.builder.master("local[2]").appName("headrace-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.stopTimeout", "20s")
               .config("spark.driver.memory", "2g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    configure(session)
    yield session
    session.stop()
