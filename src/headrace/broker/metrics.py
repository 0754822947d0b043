"""Prometheus metrics of the broker, served over HTTP by the broker's own event loop.

Two kinds of figures:

- counters the hot paths bump (``counters.BrokerMetrics``: requests and their latency per
  API, bytes and records in, bytes out, per partition; connections; cleaner passes);
- everything else is read from the broker's state when scraped (``BrokerCollector``): log
  offsets and sizes, consumer groups (state, members, committed offsets, lag), open
  transactions.

Names follow kafka_exporter (``kafka_topic_partition_current_offset``,
``kafka_consumergroup_lag``, ...), kafka-lag-exporter (``kafka_consumergroup_group_lag_seconds``)
and the JMX exporter's usual rules for broker meters (``kafka_server_brokertopicmetrics_*``),
so existing dashboards find them; the rest are ``headrace_*``.

Lag is never phantom: when a group's committed offset is below the log start (retention
deleted what it had not read), the lag counts the records that still exist, from the log
start. Lag in seconds is how old the oldest unconsumed record is (now minus its timestamp),
0 when nothing is unconsumed, never negative.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from headrace.broker.counters import LATENCY_BUCKETS
from headrace.broker.registry import API_TABLE
from headrace.protocol.errors import ProtocolError
from headrace.protocol.records import record_timestamps
from headrace.storage.errors import StorageError

if TYPE_CHECKING:
    from headrace.broker.state import BrokerState
    from headrace.storage.log import PartitionLog

log = logging.getLogger("headrace.broker")


def record_timestamp(plog: PartitionLog, offset: int) -> int | None:
    """The timestamp (ms) of the record at ``offset``, or of the first one after it; None
    past the end or if its batch cannot be decoded."""
    try:
        data = plog.read(offset, 1, min_one=True).data
    except (OSError, ProtocolError, StorageError):  # StorageError: in the object store
        return None
    if not data:
        return None
    try:
        stamps = record_timestamps(data[: _batch_size(data)])
    except ProtocolError:
        return None
    return next((ts for o, ts in stamps if o >= offset), None)


def _batch_size(data: bytes) -> int:
    return 12 + int.from_bytes(data[8:12], "big", signed=True)


class BrokerCollector(Collector):
    """Builds every family from ``state`` at scrape time (on the event loop)."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state
        self._stamps: dict[tuple[str, int, int], int | None] = {}  # (topic, p, offset) -> ts

    def collect(self) -> Iterator[Metric]:
        yield from self._log_families()
        yield from self._traffic_families()
        yield from self._group_families()
        yield from self._txn_families()

    # -- logs ------------------------------------------------------------------------------

    def _log_families(self) -> Iterator[Metric]:
        state = self.state
        brokers = GaugeMetricFamily("kafka_brokers", "Number of brokers in the cluster.")
        brokers.add_metric([], 1)
        yield brokers
        parts = GaugeMetricFamily("kafka_topic_partitions", "Partitions of a topic.",
                                  labels=["topic"])
        current = GaugeMetricFamily("kafka_topic_partition_current_offset",
                                    "High watermark of a partition.", labels=["topic", "partition"])
        oldest = GaugeMetricFamily("kafka_topic_partition_oldest_offset",
                                   "Log start offset of a partition.", labels=["topic", "partition"])
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes on disk of a partition's log.",
                                 labels=["topic", "partition"])
        stable = GaugeMetricFamily("headrace_partition_last_stable_offset",
                                   "Last stable offset (read_committed end) of a partition.",
                                   labels=["topic", "partition"])
        for name, topic in sorted(state.logs.topics.items()):
            parts.add_metric([name], len(topic.partitions))
            for i, plog in enumerate(topic.partitions):
                labels = [name, str(i)]
                current.add_metric(labels, plog.log_end_offset)
                oldest.add_metric(labels, plog.log_start_offset)
                size.add_metric(labels, plog.size_bytes)
                stable.add_metric(labels, plog.last_stable_offset)
        yield from (parts, current, oldest, size, stable)

    # -- traffic ---------------------------------------------------------------------------

    def _traffic_families(self) -> Iterator[Metric]:
        m = self.state.metrics
        for family, per_partition, help_text, partition_name in (
                ("bytesin", m.bytes_in, "Bytes appended", "headrace_partition_bytes_in"),
                ("messagesin", m.records_in, "Records appended",
                 "headrace_partition_records_in"),
                ("bytesout", m.bytes_out, "Bytes sent to fetchers",
                 "headrace_partition_bytes_out")):
            topic_total = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{family}",
                                              f"{help_text}, per topic.", labels=["topic"])
            partition = CounterMetricFamily(partition_name, f"{help_text}, per partition.",
                                            labels=["topic", "partition"])
            totals: dict[str, int] = {}
            for (topic, p), value in sorted(per_partition.items()):
                partition.add_metric([topic, str(p)], value)
                totals[topic] = totals.get(topic, 0) + value
            for topic, value in totals.items():
                topic_total.add_metric([topic], value)
            yield topic_total
            yield partition
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests handled, per API.", labels=["request"])
        latency = HistogramMetricFamily("headrace_request_duration_seconds",
                                        "Time from a request's arrival to its response "
                                        "(long-polling fetches included).", labels=["request"])
        for api_key, counts in sorted(m.request_counts.items()):
            spec = API_TABLE.get(api_key)
            name = spec.request_class.__name__.removesuffix("Request") if spec else str(api_key)
            total = sum(counts)
            requests.add_metric([name], total)
            cumulative, buckets = 0, []
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            latency.add_metric([name], buckets, m.request_seconds[api_key])
        yield requests
        yield latency
        active = GaugeMetricFamily("headrace_connections_active", "Open client connections.")
        active.add_metric([], m.connections_active)
        accepted = CounterMetricFamily("headrace_connections", "Client connections accepted.")
        accepted.add_metric([], m.connections_total)
        yield active
        yield accepted
        cleaner: list[tuple[str, float, str]] = [
            ("headrace_log_cleaner_passes", m.cleaner_passes, "Log cleaner passes."),
            ("headrace_log_cleaner_bytes_read", m.cleaner_bytes_read, "Bytes the cleaner read."),
            ("headrace_log_cleaner_bytes_written", m.cleaner_bytes_written,
             "Bytes the cleaner wrote."),
            ("headrace_log_cleaner_records_removed", m.cleaner_records_removed,
             "Records the cleaner removed."),
            ("headrace_log_cleaner_seconds", m.cleaner_seconds, "Time spent cleaning.")]
        for name, amount, text in cleaner:
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], amount)
            yield counter
        yield from self._tiering_families()

    def _tiering_families(self) -> Iterator[Metric]:
        """Tiered storage: copies, remote reads (rate, bytes, latency, cache), and per
        partition the remote size and the lag of the copy (closed segments waiting)."""
        tier = self.state.remote
        if tier is None:
            return
        t, r = tier.stats, tier.reader.stats
        counters: list[tuple[str, float, str]] = [
            ("headrace_remote_copy_segments", t.segments_copied,
             "Segments copied to the object store."),
            ("headrace_remote_copy_bytes", t.bytes_copied, "Bytes copied to the object store."),
            ("headrace_remote_copy_seconds", t.copy_seconds, "Time spent copying segments."),
            ("headrace_remote_copy_errors", t.copy_errors, "Failed segment copies (retried)."),
            ("headrace_remote_delete_segments", t.segments_deleted,
             "Remote segments deleted by retention."),
            ("headrace_remote_fetch_requests", r.reads, "Reads served from remote segments."),
            ("headrace_remote_fetch_bytes", r.read_bytes, "Bytes read from remote segments."),
            ("headrace_remote_fetch_seconds", r.read_seconds,
             "Time spent in remote reads (over requests: the mean latency)."),
            ("headrace_remote_fetch_errors", r.errors, "Remote reads the store failed."),
            ("headrace_remote_store_gets", r.store_gets, "GETs sent to the object store."),
            ("headrace_remote_cache_hits", r.cache_hits, "Remote reads served by the cache.")]
        for name, amount, text in counters:
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], amount)
            yield counter
        size = GaugeMetricFamily("headrace_remote_log_size_bytes",
                                 "Bytes of a partition in the object store.",
                                 labels=["topic", "partition"])
        lag = GaugeMetricFamily("headrace_remote_copy_lag_bytes",
                                "Bytes of closed segments not yet copied to the object store.",
                                labels=["topic", "partition"])
        lag_segments = GaugeMetricFamily("headrace_remote_copy_lag_segments",
                                         "Closed segments not yet copied to the object store.",
                                         labels=["topic", "partition"])
        for topic in self.state.logs.topics.values():
            for p, plog in enumerate(topic.partitions):
                if plog.remote is None:
                    continue
                labels = [topic.name, str(p)]
                size.add_metric(labels, plog.remote.size_bytes)
                lag_bytes, waiting = tier.upload_lag(plog)
                lag.add_metric(labels, lag_bytes)
                lag_segments.add_metric(labels, waiting)
        yield size
        yield lag
        yield lag_segments

    # -- consumer groups -------------------------------------------------------------------

    def _group_families(self) -> Iterator[Metric]:
        state = self.state
        now_ms = int(time.time() * 1000)
        members = GaugeMetricFamily("kafka_consumergroup_members", "Members of a group.",
                                    labels=["consumergroup"])
        group_state = GaugeMetricFamily("headrace_consumergroup_state",
                                        "1 for the state a group is in.",
                                        labels=["consumergroup", "protocol", "state"])
        for gid, group in sorted(state.groups.groups.items()):
            members.add_metric([gid], len(group.members))
            group_state.add_metric([gid, "classic", group.state.value], 1)
        for gid, cgroup in sorted(state.consumer_groups.groups.items()):
            members.add_metric([gid], len(cgroup.members))
            group_state.add_metric([gid, "consumer", cgroup.state.value], 1)
        yield members
        yield group_state
        committed = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                      "Committed offset of a group on a partition.",
                                      labels=["consumergroup", "topic", "partition"])
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "Records of a partition a group has not consumed yet (from "
                                "the log start if its offset fell below it).",
                                labels=["consumergroup", "topic", "partition"])
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "Lag summed over a topic.",
                                    labels=["consumergroup", "topic"])
        lag_seconds = GaugeMetricFamily("kafka_consumergroup_group_lag_seconds",
                                        "Age of the oldest record a group has not consumed.",
                                        labels=["group", "topic", "partition"])
        max_seconds = GaugeMetricFamily("kafka_consumergroup_group_max_lag_seconds",
                                        "Largest lag in seconds over a group's partitions.",
                                        labels=["group"])
        seen: set[tuple[str, int, int]] = set()
        for gid, offsets in sorted(state.offsets.offsets.items()):
            sums: dict[str, int] = {}
            worst = 0.0
            for (topic, p), c in sorted(offsets.items()):
                topic_obj = state.logs.topics.get(topic)
                if topic_obj is None or not 0 <= p < len(topic_obj.partitions):
                    continue
                plog = topic_obj.partitions[p]
                end, start = plog.log_end_offset, plog.log_start_offset
                first_unread = max(c.offset, start)
                records = max(end - first_unread, 0)
                seconds = 0.0
                if records:
                    key = (topic, p, first_unread)
                    seen.add(key)
                    if key not in self._stamps:
                        self._stamps[key] = record_timestamp(plog, first_unread)
                    stamp = self._stamps[key]
                    if stamp is not None:
                        seconds = max(now_ms - stamp, 0) / 1000.0
                labels = [gid, topic, str(p)]
                committed.add_metric(labels, c.offset)
                lag.add_metric(labels, records)
                lag_seconds.add_metric(labels, seconds)
                sums[topic] = sums.get(topic, 0) + records
                worst = max(worst, seconds)
            for topic, total in sums.items():
                lag_sum.add_metric([gid, topic], total)
            if sums:
                max_seconds.add_metric([gid], worst)
        self._stamps = {k: v for k, v in self._stamps.items() if k in seen}
        yield from (committed, lag, lag_sum, lag_seconds, max_seconds)

    # -- transactions ----------------------------------------------------------------------

    def _txn_families(self) -> Iterator[Metric]:
        now_ms = int(time.time() * 1000)
        by_state: dict[str, int] = {}
        oldest = 0.0
        for meta in self.state.txns.txns.values():
            label = meta.state.label
            by_state[label] = by_state.get(label, 0) + 1
            if label == "Ongoing" and meta.start_ms >= 0:
                oldest = max(oldest, (now_ms - meta.start_ms) / 1000.0)
        txns = GaugeMetricFamily("headrace_transactions",
                                 "Transactional ids by transaction state.", labels=["state"])
        for label, count in sorted(by_state.items()):
            txns.add_metric([label], count)
        yield txns
        age = GaugeMetricFamily("headrace_transaction_oldest_open_seconds",
                                "Age of the oldest ongoing transaction.")
        age.add_metric([], oldest)
        yield age


async def serve_metrics(state: BrokerState, host: str, port: int) -> asyncio.Server:
    """An HTTP endpoint for ``GET /metrics`` (any path answers the same), on the event
    loop so scrapes read a consistent state. One request per connection."""
    collector = BrokerCollector(state)  # keeps the lag-seconds lookups between scrapes
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method = request.split(b" ", 1)[0]
            if method not in (b"GET", b"HEAD"):
                body, status = b"method not allowed\n", b"405 Method Not Allowed"
            else:
                body, status = generate_latest(registry), b"200 OK"
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain; version=0.0.4;"
                         b" charset=utf-8\r\nContent-Length: " + str(len(body)).encode()
                         + b"\r\nConnection: close\r\n\r\n" + (b"" if method == b"HEAD" else body))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            pass
        except Exception:  # supervisor: a failed scrape must not disturb the broker
            log.exception("serving metrics failed")
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
