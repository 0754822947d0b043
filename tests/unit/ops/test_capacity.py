"""Capacity planning arithmetic: units, buffer time, retention windows, falling off."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headrace.ops.capacity import (
    TopicRate,
    broker_load,
    buffer_seconds,
    falls_off_in,
    format_bytes,
    format_duration,
    parse_duration,
    parse_rate,
    parse_size,
    retention_window_s,
    window_records,
)
from headrace.ops.errors import InvalidInputError


@pytest.mark.parametrize(("text", "expected"), [
    ("2TB", 2e12), ("2 tb", 2e12), ("1.5GB", 1.5e9), ("500MiB", 500 * 2**20), ("4096", 4096),
    ("1KiB", 1024), ("3k", 3000), ("1PB", 1e15), ("2TiB", 2 * 2**40), (".5GB", 5e8),
])
def test_parse_size(text: str, expected: float) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("50MB/s", 50e6), ("50MB", 50e6), ("3GiB/h", 3 * 2**30 / 3600), ("1.2TB/day", 1.2e12 / 86400),
    ("60MB/min", 1e6), ("10 KB / sec", 1e4),
])
def test_parse_rate(text: str, expected: float) -> None:
    assert parse_rate(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["", "TB", "2XB", "-1GB", "1e3MB", "5MB/fortnight", "1,5GB"])
def test_bad_sizes_and_rates(bad: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_rate(bad)


def test_parse_duration() -> None:
    assert [parse_duration(t) for t in ("5s", "500ms", "2min", "1h", "3", "7d", "1 day")] == [
        5, 0.5, 120, 3600, 3, 7 * 86400, 86400]
    with pytest.raises(InvalidInputError):
        parse_duration("soon")


def test_the_seeds_example_and_replication() -> None:
    # DDIA ch. 11: a 6 TB disk written at 150 MB/s fills in about 11 hours.
    assert buffer_seconds(6e12, 150e6) / 3600 == pytest.approx(11.11, abs=0.01)
    assert format_duration(buffer_seconds(6e12, 150e6)) == "11.1 hours"
    # 2 TB at 50 MB/s, each byte stored three times.
    assert buffer_seconds(2e12, 50e6, replication=3) == pytest.approx(13_333.33, abs=0.01)
    with pytest.raises(InvalidInputError):
        buffer_seconds(1e12, 0)


@given(st.floats(1e6, 1e16), st.floats(1, 1e10), st.integers(1, 5))
def test_buffer_time_is_disk_over_written_rate(disk: float, rate: float, replication: int) -> None:
    seconds = buffer_seconds(disk, rate, replication)
    assert seconds * rate * replication == pytest.approx(disk)
    assert buffer_seconds(disk * 2, rate, replication) == pytest.approx(2 * seconds)


def test_formatting() -> None:
    assert format_bytes(61_600) == "61.6 KB"
    assert format_bytes(12) == "12 B"
    assert format_duration(90) == "1.5 minutes"
    assert format_duration(3 * 86400) == "3 days"
    assert format_duration(None) == "never"
    assert format_duration(math.inf) == "never"


def topic(retention_ms: int = -1, retention_bytes: int = -1, policy: str = "delete",
          bytes_per_s: float | None = 1000.0) -> TopicRate:
    return TopicRate("t", 2, 10.0, bytes_per_s, 0, retention_ms, retention_bytes, policy)


def test_retention_window() -> None:
    assert retention_window_s(topic(retention_ms=600_000)) == 600
    # 1 MB per partition at 500 B/s per partition: 2000 s, below the time limit.
    assert retention_window_s(topic(600_000_000, 1_000_000)) == 2000
    assert retention_window_s(topic()) is None  # unlimited
    assert retention_window_s(topic(600_000, policy="compact")) is None
    assert retention_window_s(topic(-1, 1_000_000, bytes_per_s=None)) is None


def test_window_records() -> None:
    assert window_records(topic(retention_ms=600_000), 5.0, 100.0) == 3000
    assert window_records(topic(600_000, 1000), 5.0, 100.0) == 10
    assert window_records(topic(policy="compact"), 5.0, 100.0) is None


def test_falls_off() -> None:
    # 3000 records retained, 1000 behind, falling behind by 5 records/s: 400 s.
    assert falls_off_in(1000, 3000, produce_rate=10, consume_rate=5) == 400
    assert falls_off_in(1000, 3000, produce_rate=10, consume_rate=10) is None  # keeping up
    assert falls_off_in(1000, None, produce_rate=10, consume_rate=0) is None  # unlimited
    assert falls_off_in(3500, 3000, produce_rate=10, consume_rate=0) == 0


RATES = st.integers(0, 100_000).map(lambda n: n / 10)


@given(st.floats(0, 1e6), st.floats(1, 1e7), RATES, RATES)
def test_falling_off_means_lag_reaches_the_window(lag: float, window: float, produce: float,
                                                  consume: float) -> None:
    t = falls_off_in(lag, window, produce, consume)
    if t is None:
        assert produce <= consume and lag < window
    elif t > 0:
        assert lag + (produce - consume) * t == pytest.approx(window)
    else:
        assert lag >= window


def test_broker_load_of_a_replicated_cluster() -> None:
    """Seed 004's 150 MB/s on 3 brokers, RF 3, min ISR 2, two consumer groups: every broker
    writes 150 MB/s, receives 150 (50 from producers, 100 as a follower), sends 200
    (100 to consumers, 100 to followers); one broker may fail."""
    load = broker_load(150e6, brokers=3, replication=3, min_insync_replicas=2,
                       partitions=12, consumer_groups=2)
    assert load.disk_write_bytes_per_s == pytest.approx(150e6)
    assert load.network_in_bytes_per_s == pytest.approx(150e6)
    assert load.network_out_bytes_per_s == pytest.approx(200e6)
    assert load.partition_replicas == 12
    assert load.tolerated_failures == 1
    single = broker_load(150e6, brokers=1, replication=1)
    assert single.network_out_bytes_per_s == pytest.approx(150e6)
    assert single.tolerated_failures == 0


@pytest.mark.parametrize(("brokers", "replication", "min_isr"), [(2, 3, 1), (3, 3, 4), (3, 3, 0)])
def test_broker_load_refuses_impossible_layouts(brokers: int, replication: int,
                                                min_isr: int) -> None:
    with pytest.raises(InvalidInputError):
        broker_load(1e6, brokers, replication, min_isr)
