"""Log configuration, with Kafka's topic-config names in snake_case."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class LogConfig:
    """Per-partition log settings. A topic may override any of them (see ``with_overrides``)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    # fsync before acknowledging a produce (group commit across concurrent producers).
    flush_on_ack: bool = False
    cleanup_policy: str = "delete"
    # Kafka's producer.id.expiration.ms (a broker setting, not a topic config).
    producer_id_expiration_ms: int = 24 * 3600 * 1000

    def with_overrides(self, configs: dict[str, str]) -> LogConfig:
        """Return a copy with Kafka-named topic configs (``segment.bytes`` ...) applied.

        Raises ``ValueError`` for an unknown name or an unparsable value.
        """
        changes: dict[str, Any] = {}
        for name, value in configs.items():
            attr = TOPIC_CONFIGS.get(name)
            if attr is None:
                if name in PASSTHROUGH_CONFIGS:
                    continue
                raise ValueError(f"unknown topic config {name!r}")
            current = getattr(self, attr)
            if isinstance(current, bool):
                changes[attr] = value.lower() == "true"
            elif isinstance(current, int):
                changes[attr] = int(value)
            else:
                changes[attr] = value
        return replace(self, **changes)

    def as_kafka_configs(self) -> dict[str, str]:
        """This config under Kafka's names, as DescribeConfigs reports it."""
        out: dict[str, str] = {}
        for name, attr in TOPIC_CONFIGS.items():
            v = getattr(self, attr)
            out[name] = str(v).lower() if isinstance(v, bool) else str(v)
        return out


TOPIC_CONFIGS: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.on.ack": "flush_on_ack",
    "cleanup.policy": "cleanup_policy",
}

# Accepted and stored for client compatibility but without effect on a single broker.
PASSTHROUGH_CONFIGS = frozenset(
    {"min.insync.replicas", "unclean.leader.election.enable", "message.timestamp.type",
     "compression.type", "max.message.bytes", "message.format.version"}
)
