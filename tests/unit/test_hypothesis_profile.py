"""The suite's Hypothesis profile (``tests/conftest.py``): no property fails on the
machine's speed alone."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def test_no_per_example_deadline_and_no_too_slow_health_check() -> None:
    assert settings().deadline is None
    assert HealthCheck.too_slow in settings().suppress_health_check


@settings(max_examples=2)
@given(st.integers())
def test_a_slow_example_passes(n: int) -> None:
    """One example slower than Hypothesis's default 200 ms deadline (a loaded machine)."""
    time.sleep(0.25)
