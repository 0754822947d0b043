"""The broker's traffic counters, bumped by its hot paths (``BrokerMetrics``).

Plain integers touched from the event loop only, so a produce or fetch pays a dict update,
not a lock. ``metrics`` turns them into Prometheus families when scraped; a broker without
``--metrics-port`` keeps ``NullMetrics``, whose hot-path calls do nothing.
"""

from __future__ import annotations

import bisect

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)
TopicPartition = tuple[str, int]


class BrokerMetrics:
    """Counters bumped by the broker's hot paths; event-loop thread only."""

    def __init__(self) -> None:
        self.request_counts: dict[int, list[int]] = {}  # api key -> per-bucket counts
        self.request_seconds: dict[int, float] = {}
        self.bytes_in: dict[TopicPartition, int] = {}
        self.records_in: dict[TopicPartition, int] = {}
        self.bytes_out: dict[TopicPartition, int] = {}
        self.connections_active = 0
        self.connections_total = 0
        self.cleaner_passes = 0
        self.cleaner_bytes_read = 0
        self.cleaner_bytes_written = 0
        self.cleaner_records_removed = 0
        self.cleaner_seconds = 0.0

    def request(self, api_key: int, seconds: float) -> None:
        counts = self.request_counts.get(api_key)
        if counts is None:
            counts = self.request_counts[api_key] = [0] * (len(LATENCY_BUCKETS) + 1)
            self.request_seconds[api_key] = 0.0
        counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.request_seconds[api_key] += seconds

    def produced(self, tp: TopicPartition, nbytes: int, records: int) -> None:
        self.bytes_in[tp] = self.bytes_in.get(tp, 0) + nbytes
        self.records_in[tp] = self.records_in.get(tp, 0) + records

    def fetched(self, tp: TopicPartition, nbytes: int) -> None:
        self.bytes_out[tp] = self.bytes_out.get(tp, 0) + nbytes

    def cleaned(self, bytes_read: int, bytes_written: int, records_removed: int,
                seconds: float) -> None:
        self.cleaner_passes += 1
        self.cleaner_bytes_read += bytes_read
        self.cleaner_bytes_written += bytes_written
        self.cleaner_records_removed += records_removed
        self.cleaner_seconds += seconds


class NullMetrics(BrokerMetrics):
    """What a broker without ``--metrics-port`` keeps: connections only; the hot paths'
    calls do nothing (so metrics cost nothing when nobody scrapes)."""

    def request(self, api_key: int, seconds: float) -> None:
        pass

    def produced(self, tp: TopicPartition, nbytes: int, records: int) -> None:
        pass

    def fetched(self, tp: TopicPartition, nbytes: int) -> None:
        pass
