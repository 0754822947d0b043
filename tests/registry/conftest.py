"""A registry process against the session's broker, and Confluent's client for it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from headrace.registry.client import RegistryClient
from headrace.testing import EmbeddedBroker, SchemaRegistryProcess


@pytest.fixture(scope="session")
def registry(broker: EmbeddedBroker) -> Iterator[SchemaRegistryProcess]:
    """One registry process for the session (tests use fresh subjects; don't kill it)."""
    with SchemaRegistryProcess(broker.bootstrap_servers) as r:
        yield r


@pytest.fixture
def sr(registry: SchemaRegistryProcess) -> SchemaRegistryClient:
    """Confluent's own registry client, uncached per test."""
    return SchemaRegistryClient({"url": registry.url})


@pytest.fixture
def rest(registry: SchemaRegistryProcess) -> Iterator[RegistryClient]:
    client = RegistryClient(registry.url)
    yield client
    client.close()


@pytest.fixture
def subject() -> str:
    return f"s-{uuid.uuid4().hex[:10]}-value"
