"""The streaming tests' step runners keep a query running: stop it after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.streaming.harness import RUNNING


@pytest.fixture(autouse=True)
def _stop_step_runners() -> Iterator[None]:
    yield
    while RUNNING:
        RUNNING.pop().close()
