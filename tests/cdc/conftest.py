"""A throwaway PostgreSQL cluster for the session; each test its own schema and slot."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from headrace.testing import PostgresServer


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as pg:
        yield pg


@pytest.fixture
def name() -> str:
    """A schema, slot, publication and topic prefix of this test's own."""
    return f"t{uuid.uuid4().hex[:10]}"
