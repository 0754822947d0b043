"""Log configuration: Kafka's topic configs, their defaults, types and validation.

``CONFIG_DEFS`` is the one table of topic configs. Each has Kafka's name, its broker-wide
synonym (the ``server.properties`` name that sets the default for every topic), a type,
a validator and a one-line doc. ``LogConfig`` holds the parsed values a partition log uses;
a topic's overrides are Kafka-named strings applied with ``with_overrides``, which
validates names and values and raises ``InvalidConfigError`` with Kafka's wording.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from enum import IntEnum
from typing import Any

from headrace.storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
# headrace's own topic config (Kafka's set has no such name); broker-wide:
# headrace.log.flush.on.ack.
FLUSH_ON_ACK = "headrace.flush.on.ack"
INT_MAX = 2**31 - 1
POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


class ConfigType(IntEnum):
    """Kafka's config types, numbered as DescribeConfigs v3+ reports them."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7


@dataclass(frozen=True)
class LogConfig:
    """Per-partition log settings, Kafka's defaults unless stated. Frozen: a config change
    swaps the whole value (``with_overrides``)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    # headrace's own headrace.flush.on.ack: fsync before acknowledging a produce (group
    # commit across concurrent producers).
    flush_on_ack: bool = False
    # Kafka's flush.messages / flush.ms: fsync once this many messages are unflushed
    # (before acknowledging the produce that reached it), and at most this long after an
    # unflushed append. LONG_MAX (Kafka's default): never, the page cache only.
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    # "delete", "compact" or "compact,delete" (normalized: sorted, no duplicates).
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    # Largest record batch a producer may append (Kafka's max.message.bytes).
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = "CreateTime"
    # CreateTime records may be at most this much older / newer than the broker's clock
    # (Kafka 4's defaults: no limit in the past, one hour ahead).
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600 * 1000
    # Kafka's producer.id.expiration.ms (a broker setting, not a topic config).
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    # Tiered storage (KIP-405): closed segments are copied to the object store; the local
    # copy is kept for local.retention.ms / local.retention.bytes (-2: as retention.ms /
    # retention.bytes), the whole log for retention.ms / retention.bytes.
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2

    @property
    def effective_local_retention_ms(self) -> int:
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        return (self.retention_bytes if self.local_retention_bytes == -2
                else self.local_retention_bytes)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def with_overrides(self, configs: Mapping[str, str]) -> LogConfig:
        """A copy with Kafka-named topic configs (``segment.bytes`` ...) applied.

        Raises ``InvalidConfigError`` for an unknown name or an invalid value; accepted
        configs without effect here (``PASSTHROUGH``) are validated and otherwise ignored.
        """
        changes: dict[str, Any] = {}
        for name, raw in configs.items():
            defn = CONFIG_DEFS.get(name)
            if defn is None:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
            value = defn.parse(raw)
            if defn.attr is not None:
                changes[defn.attr] = value
        return replace(self, **changes)

    def as_kafka_configs(self) -> dict[str, str]:
        """Every topic config under Kafka's name, as DescribeConfigs reports it."""
        return {name: defn.value_of(self) for name, defn in CONFIG_DEFS.items()}


@dataclass(frozen=True)
class ConfigDef:
    """One topic config: how to parse and check it, and where it lives in ``LogConfig``
    (``attr`` None: accepted for compatibility, without effect on one broker)."""

    name: str
    attr: str | None
    type: ConfigType
    doc: str
    broker_name: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    passthrough_default: str = ""
    # False for Kafka's topic-only configs (no broker-wide setting of that name).
    broker_level: bool = True

    def _invalid(self, raw: str, why: str) -> InvalidConfigError:
        return InvalidConfigError(f"Invalid value {raw} for configuration {self.name}: {why}")

    def parse(self, raw: str) -> Any:
        """The typed value of ``raw``; ``InvalidConfigError`` naming the problem."""
        text = raw.strip()
        value: Any
        if self.type in (ConfigType.INT, ConfigType.LONG):
            bound = INT_MAX if self.type == ConfigType.INT else LONG_MAX
            digits = text[1:] if text[:1] in "+-" else text
            value = int(text) if digits.isdigit() and digits.isascii() else None
            if value is None or not -bound - 1 <= value <= bound:
                raise self._invalid(raw, f"Not a number of type {self.type.name}")
        elif self.type == ConfigType.DOUBLE:
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise self._invalid(raw, "Not a number of type DOUBLE")
        elif self.type == ConfigType.BOOLEAN:
            if text.lower() not in ("true", "false"):
                raise self._invalid(raw, "Expected value to be either true or false")
            value = text.lower() == "true"
        elif self.type == ConfigType.LIST:
            items = [item.strip() for item in text.split(",") if item.strip()]
            if not items and self.choices is None:
                return ""
            if not items:
                raise self._invalid(raw, f"must list at least one of: {', '.join(self.choices or ())}")
            for item in items:
                if self.choices is not None and item not in self.choices:
                    raise self._invalid(raw, f"{item!r} is not one of: {', '.join(self.choices)}")
            value = ",".join(sorted(set(items)))
        else:
            value = text
            if self.choices is not None and value not in self.choices:
                raise self._invalid(raw, f"String must be one of: {', '.join(self.choices)}")
        special = _SPECIAL_CHECKS.get(self.name)
        if special is not None:
            why = special(self.name, value)
            if why is not None:
                raise self._invalid(raw, why) if why[0] != "!" else InvalidConfigError(why[1:])
        if self.minimum is not None and value < self.minimum:
            raise self._invalid(raw, f"Value must be at least {_num(self.minimum)}")
        if self.maximum is not None and value > self.maximum:
            raise self._invalid(raw, f"Value must be no more than {_num(self.maximum)}")
        return value

    def canonical(self, raw: str) -> str:
        """``raw`` validated and written the way DescribeConfigs shows it."""
        return self.format(self.parse(raw))

    def format(self, value: Any) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        return str(value)

    def value_of(self, config: LogConfig) -> str:
        if self.attr is None:
            return self.passthrough_default
        return self.format(getattr(config, self.attr))


def _gzip_level(name: str, value: Any) -> str | None:
    return None if value == -1 or 1 <= value <= 9 else "Value must be between 1 and 9 or equal to -1"


def _throttled_replicas(name: str, value: Any) -> str | None:
    items = value.split(",") if value else []
    if items == ["*"] or all(
            len(p := item.split(":")) == 2 and all(x.isdigit() for x in p) for item in items):
        return None
    return (f"!Invalid value [{', '.join(items)}] for configuration {name}: {name} must be "
            "the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


# Kafka's validators that are more than a type and a range: a returned reason rejects the
# value ("!...": Kafka's whole message, not an "Invalid value ..." one).
_SPECIAL_CHECKS: dict[str, Callable[[str, Any], str | None]] = {
    "compression.gzip.level": _gzip_level,
    "follower.replication.throttled.replicas": _throttled_replicas,
    "leader.replication.throttled.replicas": _throttled_replicas,
}


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _def(name: str, attr: str | None, type_: ConfigType, broker_name: str, doc: str,
         **kw: Any) -> tuple[str, ConfigDef]:
    return name, ConfigDef(name, attr, type_, doc, broker_name, **kw)


CONFIG_DEFS: dict[str, ConfigDef] = dict([
    _def("cleanup.policy", "cleanup_policy", ConfigType.LIST, "log.cleanup.policy",
         "delete: drop old segments by retention.ms/bytes; compact: keep the latest "
         "record per key; or both", choices=POLICIES),
    _def("retention.ms", "retention_ms", ConfigType.LONG, "log.retention.ms",
         "delete segments whose newest record is older than this; -1: no time limit",
         minimum=-1),
    _def("retention.bytes", "retention_bytes", ConfigType.LONG, "log.retention.bytes",
         "delete the oldest segments while a partition is larger; -1: no size limit",
         minimum=-1),
    _def("segment.bytes", "segment_bytes", ConfigType.INT, "log.segment.bytes",
         "roll to a new segment file after this many bytes", minimum=14),
    _def("segment.ms", "segment_ms", ConfigType.LONG, "log.roll.ms",
         "roll to a new segment file after this long (checked on append)", minimum=1),
    _def("delete.retention.ms", "delete_retention_ms", ConfigType.LONG,
         "log.cleaner.delete.retention.ms",
         "keep tombstones and transaction markers this long after they were first cleaned",
         minimum=0),
    _def("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", ConfigType.DOUBLE,
         "log.cleaner.min.cleanable.ratio",
         "compact once the uncleaned share of the log reaches this ratio",
         minimum=0, maximum=1),
    _def("min.compaction.lag.ms", "min_compaction_lag_ms", ConfigType.LONG,
         "log.cleaner.min.compaction.lag.ms",
         "never compact segments holding records younger than this", minimum=0),
    _def("max.compaction.lag.ms", "max_compaction_lag_ms", ConfigType.LONG,
         "log.cleaner.max.compaction.lag.ms",
         "compact a log whose oldest uncleaned record is older than this, whatever the ratio",
         minimum=1),
    _def("max.message.bytes", "max_message_bytes", ConfigType.INT, "message.max.bytes",
         "largest record batch a producer may append", minimum=0),
    _def("message.timestamp.type", "message_timestamp_type", ConfigType.STRING,
         "log.message.timestamp.type",
         "CreateTime: the producer's timestamps; LogAppendTime: the broker's clock",
         choices=TIMESTAMP_TYPES),
    _def("message.timestamp.before.max.ms", "message_timestamp_before_max_ms",
         ConfigType.LONG, "log.message.timestamp.before.max.ms",
         "refuse CreateTime records older than this (INVALID_TIMESTAMP)", minimum=0),
    _def("message.timestamp.after.max.ms", "message_timestamp_after_max_ms",
         ConfigType.LONG, "log.message.timestamp.after.max.ms",
         "refuse CreateTime records further in the future than this (INVALID_TIMESTAMP)",
         minimum=0),
    _def("index.interval.bytes", "index_interval_bytes", ConfigType.INT,
         "log.index.interval.bytes", "bytes between two offset-index entries", minimum=0),
    _def("segment.index.bytes", "segment_index_bytes", ConfigType.INT,
         "log.index.size.max.bytes", "accepted; indexes here grow as needed", minimum=4),
    # headrace's own, not Kafka's: the prefix keeps it apart from Kafka's names.
    _def(FLUSH_ON_ACK, "flush_on_ack", ConfigType.BOOLEAN, "headrace.log.flush.on.ack",
         "headrace's own: fsync (group commit) before acknowledging a produce"),
    _def("flush.messages", "flush_messages", ConfigType.LONG, "log.flush.interval.messages",
         "fsync a partition once this many messages are unflushed, before acknowledging",
         minimum=1),
    _def("flush.ms", "flush_ms", ConfigType.LONG, "log.flush.interval.ms",
         "fsync a partition at most this long after an unflushed append", minimum=0),
    # Accepted and validated as Kafka does, without effect on one broker (COMPATIBILITY.md).
    _def("compression.gzip.level", None, ConfigType.INT, "compression.gzip.level",
         "accepted; batches are stored as the producer compressed them",
         minimum=-1, maximum=9, passthrough_default="-1"),
    _def("compression.lz4.level", None, ConfigType.INT, "compression.lz4.level",
         "accepted; batches are stored as the producer compressed them",
         minimum=1, maximum=17, passthrough_default="9"),
    _def("compression.zstd.level", None, ConfigType.INT, "compression.zstd.level",
         "accepted; batches are stored as the producer compressed them",
         minimum=-131072, maximum=22, passthrough_default="3"),
    _def("file.delete.delay.ms", None, ConfigType.LONG, "log.segment.delete.delay.ms",
         "accepted; deleted segments are removed at once", minimum=0,
         passthrough_default="60000"),
    _def("follower.replication.throttled.replicas", None, ConfigType.LIST,
         "follower.replication.throttled.replicas", "accepted; no replication here",
         passthrough_default="", broker_level=False),
    _def("leader.replication.throttled.replicas", None, ConfigType.LIST,
         "leader.replication.throttled.replicas", "accepted; no replication here",
         passthrough_default="", broker_level=False),
    _def("local.retention.bytes", "local_retention_bytes", ConfigType.LONG,
         "log.local.retention.bytes",
         "tiered topics: keep this many bytes of uploaded segments on local disk; "
         "-2: retention.bytes", minimum=-2),
    _def("local.retention.ms", "local_retention_ms", ConfigType.LONG, "log.local.retention.ms",
         "tiered topics: keep uploaded segments on local disk this long; -2: retention.ms",
         minimum=-2),
    _def("preallocate", None, ConfigType.BOOLEAN, "log.preallocate",
         "accepted; segment files grow as written", passthrough_default="false"),
    _def("remote.storage.enable", "remote_storage_enable", ConfigType.BOOLEAN,
         "remote.storage.enable",
         "copy closed segments to the remote object store (needs "
         "remote.log.storage.system.enable on the broker)", broker_level=False),
    _def("remote.log.copy.disable", None, ConfigType.BOOLEAN, "remote.log.copy.disable",
         "accepted; no tiered storage", passthrough_default="false", broker_level=False),
    _def("remote.log.delete.on.disable", None, ConfigType.BOOLEAN,
         "remote.log.delete.on.disable", "accepted; no tiered storage",
         passthrough_default="false", broker_level=False),
    _def("segment.jitter.ms", None, ConfigType.LONG, "log.roll.jitter.ms",
         "accepted; segments roll at segment.ms exactly", minimum=0,
         passthrough_default="0"),
    _def("compression.type", None, ConfigType.STRING, "compression.type",
         "accepted; batches are always stored as the producer compressed them",
         choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
         passthrough_default="producer"),
    _def("min.insync.replicas", None, ConfigType.INT, "min.insync.replicas",
         "accepted; one broker is always the whole ISR", minimum=1, passthrough_default="1"),
    _def("unclean.leader.election.enable", None, ConfigType.BOOLEAN,
         "unclean.leader.election.enable", "accepted; no effect on one broker",
         passthrough_default="false"),
])

# Kafka's broker-wide name -> topic config name.
BROKER_SYNONYMS: dict[str, str] = {d.broker_name: d.name for d in CONFIG_DEFS.values()
                                   if d.broker_level}
# Names older headrace versions stored in topic config files -> today's: still loaded.
RENAMED = {"flush.on.ack": FLUSH_ON_ACK}
_ATTRS = {f.name for f in fields(LogConfig)}
assert all(d.attr is None or d.attr in _ATTRS for d in CONFIG_DEFS.values())


def canonical_overrides(configs: Mapping[str, str]) -> dict[str, str]:
    """Topic overrides validated (``InvalidConfigError``) and written canonically."""
    out: dict[str, str] = {}
    for name, raw in configs.items():
        defn = CONFIG_DEFS.get(name)
        if defn is None:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
        out[name] = defn.canonical(raw)
    return out


def broker_log_config(configs: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
    """Broker-wide topic defaults from ``server.properties``-style names (``log.retention.ms``)
    or topic names (``retention.ms``). ``InvalidConfigError`` for anything else."""
    topic_named = {BROKER_SYNONYMS.get(name, name): value for name, value in configs.items()}
    unknown = [n for n in topic_named if n not in CONFIG_DEFS]
    if unknown:
        raise InvalidConfigError(f"Unknown broker log config name: {unknown[0]}")
    return (base or LogConfig()).with_overrides(topic_named)


@dataclass(frozen=True)
class DescribedConfig:
    """One topic config as DescribeConfigs reports it. ``source`` is ``topic`` (an
    override), ``dynamic_broker`` / ``dynamic_default`` (a dynamic broker config on this
    broker / cluster-wide), ``broker`` (a start-up default differing from Kafka's) or
    ``default``; ``synonyms`` are ``(name, value, source)`` in precedence order."""

    name: str
    value: str
    source: str
    type: ConfigType
    doc: str
    synonyms: tuple[tuple[str, str, str], ...]


def describe_topic_configs(broker_defaults: LogConfig, overrides: Mapping[str, str],
                           dynamic: Mapping[str, Mapping[str, str]] | None = None,
                           ) -> list[DescribedConfig]:
    """Every topic config of a topic with ``overrides`` on a broker whose start-up topic
    defaults are ``broker_defaults`` and whose dynamic broker configs are ``dynamic``
    (``{"dynamic_broker": {...}, "dynamic_default": {...}}`` by broker names, canonical),
    sorted by name. With ``overrides`` empty: the broker's own view (DescribeConfigs of a
    broker resource)."""
    kafka_defaults = LogConfig()
    layers = dynamic or {}
    out = []
    for name in sorted(CONFIG_DEFS):
        defn = CONFIG_DEFS[name]
        default = defn.value_of(kafka_defaults)
        broker = defn.value_of(broker_defaults)
        synonyms: list[tuple[str, str, str]] = []
        if name in overrides:
            synonyms.append((name, overrides[name], "topic"))
        for source in ("dynamic_broker", "dynamic_default"):
            if defn.broker_name in layers.get(source, {}):
                synonyms.append((defn.broker_name, layers[source][defn.broker_name], source))
        if broker != default:
            synonyms.append((defn.broker_name, broker, "broker"))
        synonyms.append((defn.broker_name, default, "default"))
        _, value, source = synonyms[0]
        out.append(DescribedConfig(name, value, source, defn.type, defn.doc, tuple(synonyms)))
    return out
