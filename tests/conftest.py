"""Shared fixtures: one real broker process per test session, fresh topics per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from headrace.spark.session import local_session
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


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One SparkSession for the whole run (start-up costs ~7 s), with format("headrace")."""
    session = local_session("headrace-tests")
    yield session
    session.stop()
