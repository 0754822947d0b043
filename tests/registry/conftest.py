"""Clients of the session's registry process (``registry``, in tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from headrace.registry.client import RegistryClient
from headrace.testing import SchemaRegistryProcess


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
