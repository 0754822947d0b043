"""Capacity planning: how long a log can buffer, and when a slow consumer falls off it.

The seeds' arithmetic: a log-based broker buffers on disk, so a consumer can fall behind
for as long as the disk holds the stream. ``buffer_seconds`` answers it for a planned
disk and rate (every byte is stored ``replication`` times). ``sample_cluster`` measures a
running cluster through the Kafka protocol only: log end offsets twice, ``sample``
seconds apart (the ingest rate per topic), partition sizes from DescribeLogDirs (bytes
per record, and the volume's usable bytes), topic configs (the retention window) and
each group's committed offsets (its lag and consume rate). ``falls_off_in`` projects the
seeds' pitfall, "lag exceeds retention", at the current trend.

Units: KB, MB, GB, TB, PB are powers of 1000; KiB, MiB, GiB, TiB, PiB powers of 1024;
case is ignored and the final B may be left out. Rates take /s, /sec, /min, /h or /day.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from headrace.ops.admin import AdminSession, TopicPart
from headrace.ops.clients import CLIENT_ID, kafka_python_settings
from headrace.ops.errors import InvalidInputError

_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4, "p": 1000**5,
          "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4, "pi": 1024**5}
_PER = {"s": 1, "sec": 1, "second": 1, "min": 60, "minute": 60, "h": 3600, "hour": 3600,
        "d": 86400, "day": 86400}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([kmgtp]i?)?b?\s*", re.IGNORECASE)
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*(ms|s|sec|m|min|h|d|days?)?\s*",
                       re.IGNORECASE)


def parse_size(text: str) -> float:
    """Bytes in ``2TB``, ``1.5 TiB``, ``500GB``, ``4096``; ``InvalidInputError`` otherwise."""
    m = _SIZE.fullmatch(text)
    if m is None:
        raise InvalidInputError(f"not a size: {text!r} (examples: 2TB, 500GiB, 1048576)")
    return float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]


def parse_rate(text: str) -> float:
    """Bytes per second in ``50MB/s``, ``3 GiB/h``, ``1.2TB/day`` (default per second)."""
    size, sep, per = text.partition("/")
    seconds = _PER.get(per.strip().lower()) if sep else 1
    if seconds is None:
        raise InvalidInputError(f"not a rate: {text!r} (examples: 50MB/s, 3GiB/h, 1TB/day)")
    return parse_size(size) / seconds


def parse_duration(text: str) -> float:
    """Seconds in ``5s``, ``500ms``, ``2min``, ``1h``, ``7d`` (a bare number is seconds)."""
    m = _DURATION.fullmatch(text)
    if m is None:
        raise InvalidInputError(f"not a duration: {text!r} (examples: 5s, 500ms, 1min, 7d)")
    unit = (m.group(2) or "s").lower()
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600,
                                "d": 86400, "day": 86400, "days": 86400}[unit]


def format_bytes(n: float) -> str:
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def format_duration(seconds: float | None) -> str:
    """``3.7 hours``, ``12 days``; "never" for None or infinity."""
    if seconds is None or math.isinf(seconds):
        return "never"
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("hours", 3600),
                       ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} seconds"


def buffer_seconds(disk_bytes: float, rate_bytes_per_s: float, replication: int = 1) -> float:
    """How long ``disk_bytes`` hold a stream of ``rate_bytes_per_s`` stored ``replication``
    times: the longest retention the disk can honour at that rate."""
    if rate_bytes_per_s <= 0 or replication < 1:
        raise InvalidInputError("the rate must be above zero and the replication at least 1")
    return disk_bytes / (rate_bytes_per_s * replication)


@dataclass(frozen=True)
class TierPlan:
    """The two tiers of a topic with tiered storage (KIP-405) for a stream of
    ``rate_bytes_per_s``: the brokers' disks keep ``local_retention_s`` of it, each byte
    ``replication`` times; the object store keeps ``retention_s`` of it (None: forever)
    once, as Kafka copies each segment from its leader only (the store's own redundancy is
    the store's business). The store holds the recent part too: a segment stays on disk
    after its copy until local retention passes."""

    rate_bytes_per_s: float
    replication: int
    local_retention_s: float
    retention_s: float | None
    local_bytes: float
    remote_bytes: float | None
    remote_bytes_per_day: float


def tier_plan(rate_bytes_per_s: float, local_retention_s: float, retention_s: float | None,
              replication: int = 1) -> TierPlan:
    """Size the local tier and the remote tier separately. ``InvalidInputError`` for a
    rate or retention of zero or less, or a local retention above the total (Kafka
    refuses local.retention.ms > retention.ms too)."""
    if rate_bytes_per_s <= 0 or replication < 1:
        raise InvalidInputError("the rate must be above zero and the replication at least 1")
    if local_retention_s <= 0:
        raise InvalidInputError("the local retention must be longer than zero")
    if retention_s is not None and local_retention_s > retention_s:
        raise InvalidInputError("the local retention cannot be longer than the retention "
                                "(Kafka refuses local.retention.ms above retention.ms)")
    return TierPlan(rate_bytes_per_s, replication, local_retention_s, retention_s,
                    local_bytes=rate_bytes_per_s * replication * local_retention_s,
                    remote_bytes=None if retention_s is None else rate_bytes_per_s * retention_s,
                    remote_bytes_per_day=rate_bytes_per_s * 86400)


@dataclass(frozen=True)
class BrokerLoad:
    """What each broker of a replicated cluster carries, spread evenly (Kafka spreads
    leaders and replicas round-robin): bytes per second written to its disk, received
    (producers' bytes for the partitions it leads plus the followers' copies it fetches)
    and sent (to consumers and to the followers of what it leads), partition replicas it
    hosts, and the brokers that may fail while acks=all writes go on."""

    brokers: int
    replication: int
    min_insync_replicas: int
    disk_write_bytes_per_s: float
    network_in_bytes_per_s: float
    network_out_bytes_per_s: float
    partition_replicas: float
    tolerated_failures: int


def broker_load(rate_bytes_per_s: float, brokers: int, replication: int,
                min_insync_replicas: int = 1, partitions: int = 0,
                consumer_groups: int = 1) -> BrokerLoad:
    """Per-broker load of a stream of ``rate_bytes_per_s`` kept ``replication`` times on
    ``brokers`` brokers and read by ``consumer_groups`` groups (each reads every byte once,
    from the leaders). Every byte is received once from a producer and ``replication - 1``
    times by followers; it is sent ``consumer_groups`` times to consumers and
    ``replication - 1`` times to followers. Writes with acks=all go on while at least
    ``min_insync_replicas`` replicas live: ``replication - min_insync_replicas`` brokers
    may fail. ``InvalidInputError`` for an impossible layout."""
    if rate_bytes_per_s < 0 or brokers < 1 or replication < 1 or consumer_groups < 0:
        raise InvalidInputError("the rate must be zero or more, brokers and replication at "
                                "least 1")
    if replication > brokers:
        raise InvalidInputError(f"a replication factor of {replication} needs at least "
                                f"{replication} brokers, not {brokers}")
    if not 1 <= min_insync_replicas <= replication:
        raise InvalidInputError(f"min.insync.replicas must be between 1 and the replication "
                                f"factor {replication}, not {min_insync_replicas}")
    copies = replication - 1
    return BrokerLoad(
        brokers=brokers, replication=replication, min_insync_replicas=min_insync_replicas,
        disk_write_bytes_per_s=rate_bytes_per_s * replication / brokers,
        network_in_bytes_per_s=rate_bytes_per_s * (1 + copies) / brokers,
        network_out_bytes_per_s=rate_bytes_per_s * (consumer_groups + copies) / brokers,
        partition_replicas=partitions * replication / brokers,
        tolerated_failures=replication - min_insync_replicas)


def falls_off_in(lag: float, window_records: float | None, produce_rate: float,
                 consume_rate: float) -> float | None:
    """Seconds until a consumer ``lag`` records behind falls out of a log that retains
    ``window_records`` records (None: unlimited), at the current produce and consume rates
    (records/s): ``(window - lag) / (produce - consume)``. 0 when the lag already exceeds
    the window; None (never) when the consumer keeps up or retention is unlimited."""
    if window_records is None:
        return None
    if lag >= window_records:
        return 0.0
    gaining = produce_rate - consume_rate
    if gaining <= 0:
        return None
    return (window_records - lag) / gaining


@dataclass
class TopicRate:
    """One topic over the sample: ``window_s`` is how long it keeps records at this rate
    (the lower of retention.ms and retention.bytes / byte rate; None: unlimited)."""

    topic: str
    partitions: int
    records_per_s: float
    bytes_per_s: float | None
    size_bytes: int | None
    retention_ms: int
    retention_bytes: int
    cleanup_policy: str
    window_s: float | None = None
    remote_bytes: int | None = None
    """Bytes in the object store (tiered storage), None for a topic without."""
    local_retention_ms: int = -2


@dataclass
class GroupRisk:
    """A group's worst partition: the one that falls out of retention first."""

    group_id: str
    topic: str
    partition: int
    lag: int
    produce_rate: float
    consume_rate: float
    falls_off_s: float | None
    below_log_start: bool


@dataclass
class ClusterSample:
    seconds: float
    topics: list[TopicRate] = field(default_factory=list)
    groups: list[GroupRisk] = field(default_factory=list)
    usable_bytes: int | None = None
    total_bytes: int | None = None

    @property
    def bytes_per_s(self) -> float:
        return sum(t.bytes_per_s or 0.0 for t in self.topics)


class CapacitySampler(AdminSession):
    """Reads rates, sizes, configs and lag from the cluster at ``bootstrap_servers``."""

    def sample(self, seconds: float, topics: Iterable[str] | None = None,
               include_internal: bool = False) -> ClusterSample:
        """Measure for ``seconds`` (blocks that long plus a few round trips)."""
        metadata = self.metadata()
        if topics:
            wanted = sorted(set(topics))
            parts = [(t, p) for t in wanted for p in self.partitions(t)]
        else:
            wanted = sorted(t for t in metadata.topics if include_internal or not t.startswith("__"))
            parts = [(t, p) for t in wanted for p in sorted(metadata.topics[t].partitions)]
        configs = {t: self._configs(t) for t in wanted}
        groups = self._group_ids()
        t0 = time.monotonic()
        ends0 = self.list_offsets(parts, "latest") if parts else {}
        sizes0, _ = self.log_dirs()
        committed0 = {g: self._committed(g) for g in groups}
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
        elapsed = time.monotonic() - t0
        ends1 = self.list_offsets(parts, "latest") if parts else {}
        starts = self.list_offsets(parts, "earliest") if parts else {}
        sizes1, disk = self.log_dirs()
        remote = self.remote_sizes
        committed1 = {g: self._committed(g) for g in groups}
        out = ClusterSample(elapsed, usable_bytes=disk[0], total_bytes=disk[1])
        rates = {tp: (ends1[tp] - ends0[tp]) / elapsed for tp in parts}
        per_record: dict[str, float | None] = {}
        for t in wanted:
            tps = [tp for tp in parts if tp[0] == t]
            records = sum(ends1[tp] - starts[tp] for tp in tps)
            size = sum(sizes1.get(tp, 0) for tp in tps) if sizes1 else None
            per_record[t] = size / records if size and records > 0 else None
            grown = [sizes1.get(tp, 0) - sizes0.get(tp, 0) for tp in tps] if sizes1 else []
            byte_rate: float | None = None
            if sizes1 and all(g >= 0 for g in grown) and sum(grown) > 0:
                byte_rate = sum(grown) / elapsed
            elif per_record[t] is not None:
                byte_rate = sum(rates[tp] for tp in tps) * (per_record[t] or 0.0)
            cfg = configs[t]
            rate = TopicRate(t, len(tps), sum(rates[tp] for tp in tps), byte_rate, size,
                             int(cfg.get("retention.ms", "-1")),
                             int(cfg.get("retention.bytes", "-1")),
                             cfg.get("cleanup.policy", "delete"))
            rate.window_s = retention_window_s(rate)
            if cfg.get("remote.storage.enable") == "true":
                rate.remote_bytes = sum(remote.get(tp, 0) for tp in tps)
                rate.local_retention_ms = int(cfg.get("local.retention.ms", "-2"))
            out.topics.append(rate)
        by_topic = {r.topic: r for r in out.topics}
        for g in groups:
            risks = []
            for tp, offset in committed1[g].items():
                if tp not in ends1:
                    continue
                topic = by_topic[tp[0]]
                lag = ends1[tp] - offset
                consumed = (offset - committed0[g].get(tp, offset)) / elapsed
                window = window_records(topic, rates[tp], per_record[tp[0]])
                risks.append(GroupRisk(g, tp[0], tp[1], lag, rates[tp], consumed,
                                       falls_off_in(lag, window, rates[tp], consumed),
                                       offset < starts[tp]))
            if risks:
                out.groups.append(min(risks, key=_urgency))
        return out

    def _configs(self, topic: str) -> dict[str, str]:
        from confluent_kafka.admin import ConfigResource, ResourceType

        resource = ConfigResource(ResourceType.TOPIC, topic)
        futures = self._admin.describe_configs([resource], request_timeout=self._timeout)
        entries = self._call(futures[resource], f"reading the configs of topic {topic!r}")
        return {name: entry.value for name, entry in entries.items()}

    def _group_ids(self) -> list[str]:
        future = self._admin.list_consumer_groups(request_timeout=self._timeout)
        result = self._call(future, "listing groups")
        return sorted(g.group_id for g in result.valid or [])

    def _committed(self, group: str) -> dict[TopicPart, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self._admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self._timeout)
        result = self._call(futures[group], f"reading the offsets of group {group!r}")
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or []
                if tp.offset >= 0 and tp.error is None}

    remote_sizes: dict[TopicPart, int]
    """Partition sizes in tiered storage's object store, from the last ``log_dirs()``."""

    def log_dirs(self) -> tuple[dict[TopicPart, int], tuple[int | None, int | None]]:
        """Partition sizes and the volumes' (usable, total) bytes, via DescribeLogDirs
        (kafka-python: librdkafka has no call for it). A partition's size is one copy's,
        the largest of its replicas (the leader's, but for a follower's unflushed tail),
        so rates and windows are the topic's, not multiplied by the replication factor;
        the volumes are summed over brokers. The sizes in the object store (the
        ``remote:`` directory tiered storage reports) go to ``remote_sizes``, not into
        the partition sizes. Empty when the cluster does not answer it."""
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        timeout_ms = int(self._timeout * 1000)
        self.remote_sizes = {}
        try:
            with KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, client_id=CLIENT_ID,
                                  request_timeout_ms=timeout_ms,
                                  bootstrap_timeout_ms=timeout_ms,
                                  **kafka_python_settings()) as client:
                answers: list[dict[str, Any]] = client.describe_log_dirs()
        except (KafkaError, ValueError, OSError):
            return {}, (None, None)
        sizes: dict[TopicPart, int] = {}
        usable = total = 0
        seen_disk = False
        for broker in answers:
            for d in broker.get("log_dirs", []):
                if str(d.get("log_dir", "")).startswith("remote:"):
                    # tiered storage's object store, not this disk: kept apart
                    for t in d.get("topics", []):
                        for p in t["partitions"]:
                            tp = (t["name"], p["partition_index"])
                            self.remote_sizes[tp] = max(self.remote_sizes.get(tp, 0),
                                                        p["partition_size"])
                    continue
                if d.get("total_bytes", -1) >= 0:
                    usable += d.get("usable_bytes", 0)
                    total += d["total_bytes"]
                    seen_disk = True
                for t in d.get("topics", []):
                    for p in t["partitions"]:
                        tp = (t["name"], p["partition_index"])
                        sizes[tp] = max(sizes.get(tp, 0), p["partition_size"])
        return sizes, ((usable, total) if seen_disk else (None, None))


def retention_window_s(t: TopicRate) -> float | None:
    """How long the topic keeps records at its current byte rate (None: unlimited)."""
    if "delete" not in t.cleanup_policy.split(","):
        return None
    windows = []
    if t.retention_ms >= 0:
        windows.append(t.retention_ms / 1000.0)
    if t.retention_bytes >= 0 and t.bytes_per_s and t.partitions:
        windows.append(t.retention_bytes / (t.bytes_per_s / t.partitions))
    return min(windows, default=None)


def window_records(t: TopicRate, partition_rate: float, bytes_per_record: float | None) -> float | None:
    """Records one partition retains at its rate: what a consumer's lag must stay below."""
    if "delete" not in t.cleanup_policy.split(","):
        return None
    windows = []
    if t.retention_ms >= 0:
        windows.append(partition_rate * t.retention_ms / 1000.0)
    if t.retention_bytes >= 0 and bytes_per_record:
        windows.append(t.retention_bytes / bytes_per_record)
    return min(windows, default=None)


def _urgency(r: GroupRisk) -> tuple[int, float]:
    if r.below_log_start:
        return (0, 0.0)
    return (1, r.falls_off_s if r.falls_off_s is not None else math.inf)
