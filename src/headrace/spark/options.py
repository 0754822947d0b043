"""Options of ``format("headrace")``, with the names of Spark's own Kafka connector.

Parsing happens on the driver when a query is defined, so a wrong option fails at once
with an ``OptionError`` naming it, never later inside a task. Option names are
case-insensitive (Spark lowercases them); ``kafka.*`` options pass through to the
librdkafka client with the prefix removed, as Spark passes them to its Kafka client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from headrace.spark.errors import OptionError
from headrace.spark.events import EventSpec, event_spec
from headrace.storage.errors import InvalidConfigError

if TYPE_CHECKING:
    from headrace.storage.remote_config import RemoteLogConfig

EARLIEST = -2
LATEST = -1

# Options Spark itself puts on every source or sink; accepted and ignored here.
_SPARK_GENERIC = frozenset({"path", "checkpointlocation", "queryname", "__partition_columns"})

# librdkafka settings the connector owns; Spark's Kafka connector refuses the same ones.
_RESERVED_CLIENT = frozenset({
    "group.id", "enable.auto.commit", "auto.offset.reset", "key.deserializer",
    "value.deserializer", "key.serializer", "value.serializer", "transactional.id",
    "enable.idempotence",
})

_SOURCE_KEYS = frozenset({
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
    "endingtimestamp", "maxoffsetspertrigger", "minpartitions", "failondataloss",
    "includeheaders", "isolation.level", "kafkaconsumer.polltimeoutms",
    "valueschema", "eventtime", "deadlettertopic", "schemaregistryurl", "valueenvelope",
    "headrace.reader",
})
_SINK_KEYS = frozenset({"topic", "delivery", "schemaregistryurl", "writeid", "writesequence"})

SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int")
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"


def schema_ddl(include_headers: bool) -> str:
    """The source's columns, those of Spark's Kafka source."""
    return SCHEMA_DDL + (HEADERS_DDL if include_headers else "")


OffsetSpec = int | dict[str, dict[int, int]]
"""A start or end: ``EARLIEST``, ``LATEST`` or explicit offsets per topic and partition."""


@dataclass(frozen=True)
class Subscription:
    """Which partitions a source reads: a topic list, a regex, or fixed partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None

    def matches(self, topic: str) -> bool:
        if self.assign is not None:
            return topic in self.assign
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamps: dict[str, dict[int, int]] | int | None
    ending_timestamp: int | None
    timestamp_strategy: Literal["error", "latest"]
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    read_committed: bool
    poll_timeout_ms: int
    client_configs: dict[str, str] = field(default_factory=dict)
    events: EventSpec | None = None
    """Set by ``valueSchema``/``eventTime``/``deadLetterTopic``: parse values as JSON."""
    raw_fetch: bool = False
    """Read raw batches with Fetch requests (``headrace.reader=fetch``, the default over
    PLAINTEXT) rather than through a librdkafka consumer (``headrace.reader=librdkafka``)."""
    columns: tuple[str, ...] | None = None
    """The columns a read yields, in this order, when the query declared a schema naming
    some of them (``headrace.spark.reading.select_columns``); None: all of them."""
    remote: RemoteLogConfig | None = None
    """The object store of the brokers' tiered storage (``headrace.remote.storage.*``, the
    brokers' own settings): a batch read takes tiered offsets straight from it."""


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    exactly_once: bool
    client_configs: dict[str, str] = field(default_factory=dict)
    schema_registry_url: str = ""
    """Set: the struct ``value`` column is written as Avro through this registry."""
    value_schema: str = ""
    value_schema_id: int | None = None
    """The registered Avro schema of the values (the driver fills both at query start)."""
    write_id: str = ""
    write_sequence: int = 0
    """A batch write with ``writeId`` is exactly-once across re-runs: its tasks' markers
    are keyed by the id, and a re-run of sequence ``n`` (e.g. ``foreachBatch``'s batch id)
    is skipped once ``n`` committed."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): str(v) for k, v in options.items()}


def _client_configs(opts: dict[str, str]) -> tuple[str, dict[str, str]]:
    bootstrap = opts.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise OptionError("option 'kafka.bootstrap.servers' is required (host:port[,host:port])")
    configs: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key[len("kafka."):]
        if name in _RESERVED_CLIENT:
            raise OptionError(f"option 'kafka.{name}' is not supported: the connector sets it "
                              "itself to keep offsets and delivery exact")
        configs[name] = value
    return bootstrap, configs


REMOTE_PREFIX = "headrace.remote.storage."


def _check_unknown(opts: dict[str, str], known: frozenset[str], kind: str) -> None:
    for key in opts:
        if key.startswith("kafka.") or key in known or key in _SPARK_GENERIC:
            continue
        if kind == "source" and key.startswith(REMOTE_PREFIX):
            continue
        raise OptionError(f"unknown {kind} option {key!r}; known: {', '.join(sorted(known))} "
                          "and kafka.* client settings"
                          + (f", {REMOTE_PREFIX}* store settings" if kind == "source" else ""))


def _remote(opts: dict[str, str], streaming: bool, configs: dict[str, str]
            ) -> RemoteLogConfig | None:
    """The store settings (the brokers' names), or None when no option names one. Only
    ``headrace.remote.storage.kind`` turns reads from the store on."""
    given = {k: v for k, v in opts.items() if k.startswith(REMOTE_PREFIX)}
    if not given:
        return None
    if "headrace.remote.storage.kind" not in given:
        raise OptionError("options headrace.remote.storage.* need "
                          "'headrace.remote.storage.kind' (filesystem or s3)")
    if streaming:
        raise OptionError("options headrace.remote.storage.* apply to batch reads only")
    if configs.get("security.protocol", "plaintext").lower() != "plaintext":
        raise OptionError("options headrace.remote.storage.* read over PLAINTEXT only, not "
                          f"kafka.security.protocol={configs['security.protocol']}")
    if given["headrace.remote.storage.kind"] == "s3" and not given.get(
            "headrace.remote.storage.s3.endpoint", "").strip():
        raise OptionError("option 'headrace.remote.storage.s3.endpoint' is required with "
                          "headrace.remote.storage.kind=s3")
    unknown = sorted(set(given) - {n.lower() for n in _REMOTE_NAMES})
    if unknown:
        raise OptionError(f"unknown source option {unknown[0]!r}; the store settings are "
                          + ", ".join(_REMOTE_NAMES))
    try:
        # imported here: the store's settings pull in the storage layer, which only a
        # batch read of tiered storage needs (every Python worker of a query parses options)
        from headrace.storage.remote_config import remote_log_config

        return remote_log_config({**given, "remote.log.storage.system.enable": "true"})
    except InvalidConfigError as e:
        raise OptionError(str(e)) from e


_REMOTE_NAMES = (
    "headrace.remote.storage.kind", "headrace.remote.storage.path",
    "headrace.remote.storage.s3.endpoint", "headrace.remote.storage.s3.bucket",
    "headrace.remote.storage.s3.access.key", "headrace.remote.storage.s3.secret.key",
    "headrace.remote.storage.s3.region", "headrace.remote.storage.s3.timeout.ms")


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise OptionError(f"option {key!r} must be true or false, got {raw!r}")
    return raw.lower() == "true"


def _positive_int(opts: dict[str, str], key: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {key!r} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {key!r} must be a positive integer, got {raw!r}")
    return value


def _json_offsets(key: str, raw: str) -> dict[str, dict[int, int]]:
    try:
        parsed = json.loads(raw)
        out = {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in parsed.items()}
    except (ValueError, AttributeError, TypeError) as e:
        raise OptionError(f"option {key!r} must be earliest, latest or JSON like "
                          f'{{"topic":{{"0":23,"1":-2}}}}, got {raw!r}') from e
    return out


def _offset_spec(opts: dict[str, str], key: str, default: int) -> OffsetSpec:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.strip().lower() == "earliest":
        return EARLIEST
    if raw.strip().lower() == "latest":
        return LATEST
    return _json_offsets(key, raw)


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise OptionError("exactly one of 'subscribe', 'subscribePattern' or 'assign' must be "
                          f"given, got {given or 'none'}")
    kind = given[0]
    raw = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern' is not a valid regex: {e}") from e
        return Subscription(pattern=raw)
    try:
        parsed = json.loads(raw)
        assign = {str(t): tuple(int(p) for p in parts) for t, parts in parsed.items()}
    except (ValueError, AttributeError, TypeError) as e:
        raise OptionError(f'option \'assign\' must be JSON like {{"topic":[0,1]}}, got {raw!r}'
                          ) from e
    if not assign:
        raise OptionError("option 'assign' names no partition")
    return Subscription(assign=assign)


def parse_source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Validate source options. ``startingOffsets`` defaults to latest for a stream and
    earliest for a batch read, as in Spark; ``endingOffsets`` applies to batch reads only."""
    opts = _lower(options)
    _check_unknown(opts, _SOURCE_KEYS, "source")
    bootstrap, configs = _client_configs(opts)
    isolation = opts.get("isolation.level") or configs.pop("isolation.level", "read_committed")
    configs.pop("isolation.level", None)
    if isolation not in ("read_committed", "read_uncommitted"):
        raise OptionError("option 'isolation.level' must be read_committed or "
                          f"read_uncommitted, got {isolation!r}")
    starting = _offset_spec(opts, "startingoffsets", LATEST if streaming else EARLIEST)
    ending = _offset_spec(opts, "endingoffsets", LATEST)
    if streaming and "endingoffsets" in opts:
        raise OptionError("option 'endingOffsets' applies to batch reads only")
    if ending == EARLIEST:
        raise OptionError("option 'endingOffsets' cannot be earliest")
    if isinstance(ending, dict) and any(o == EARLIEST for p in ending.values() for o in p.values()):
        raise OptionError("option 'endingOffsets' cannot hold -2 (earliest)")
    if isinstance(starting, dict) and any(o == LATEST for p in starting.values()
                                          for o in p.values()) and not streaming:
        raise OptionError("option 'startingOffsets' cannot hold -1 (latest) in a batch read")
    timestamps: dict[str, dict[int, int]] | int | None = None
    if "startingtimestamp" in opts:
        try:
            timestamps = int(opts["startingtimestamp"])
        except ValueError:
            raise OptionError("option 'startingTimestamp' must be milliseconds since the epoch, "
                              f"got {opts['startingtimestamp']!r}") from None
    elif "startingoffsetsbytimestamp" in opts:
        timestamps = _json_offsets("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"])
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option 'startingOffsetsByTimestampStrategy' must be error or latest")
    ending_ts: int | None = None
    if "endingtimestamp" in opts:
        if streaming:
            raise OptionError("option 'endingTimestamp' applies to batch reads only")
        try:
            ending_ts = int(opts["endingtimestamp"])
        except ValueError:
            raise OptionError("option 'endingTimestamp' must be milliseconds since the epoch") \
                from None
    max_per_trigger = _positive_int(opts, "maxoffsetspertrigger")
    if max_per_trigger is not None and not streaming:
        raise OptionError("option 'maxOffsetsPerTrigger' applies to streaming reads only")
    events: EventSpec | None = None
    event_keys = [k for k in ("valueschema", "eventtime", "deadlettertopic") if k in opts]
    if event_keys:
        if len(event_keys) != 3:
            raise OptionError("options 'valueSchema', 'eventTime' and 'deadLetterTopic' go "
                              f"together; got only {event_keys}")
        events = event_spec(opts["valueschema"], opts["eventtime"], opts["deadlettertopic"],
                            opts.get("schemaregistryurl", ""), opts.get("valueenvelope", ""))
    elif "schemaregistryurl" in opts or "valueenvelope" in opts:
        raise OptionError("options 'schemaRegistryUrl' and 'valueEnvelope' decode typed "
                          "events: they need 'valueSchema', 'eventTime' and 'deadLetterTopic'")
    return SourceOptions(
        raw_fetch=_raw_fetch(opts, configs),
        bootstrap_servers=bootstrap,
        subscription=_subscription(opts),
        starting=starting,
        ending=ending,
        starting_timestamps=timestamps,
        ending_timestamp=ending_ts,
        timestamp_strategy="latest" if strategy == "latest" else "error",
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_positive_int(opts, "minpartitions"),
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        include_headers=_bool(opts, "includeheaders", False),
        read_committed=isolation == "read_committed",
        poll_timeout_ms=_positive_int(opts, "kafkaconsumer.polltimeoutms") or 120_000,
        client_configs=configs,
        events=events,
        remote=_remote(opts, streaming, configs),
    )


def _raw_fetch(opts: dict[str, str], configs: dict[str, str]) -> bool:
    reader = opts.get("headrace.reader")
    plaintext = configs.get("security.protocol", "plaintext").lower() == "plaintext"
    if reader is None:
        return plaintext
    if reader.lower() not in ("fetch", "librdkafka"):
        raise OptionError(f"option 'headrace.reader' must be fetch or librdkafka, got {reader!r}")
    if reader.lower() == "fetch" and not plaintext:
        raise OptionError("option 'headrace.reader=fetch' reads over PLAINTEXT only; use "
                          "librdkafka with kafka.security.protocol="
                          f"{configs['security.protocol']}")
    return reader.lower() == "fetch"


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate sink options. ``delivery`` is ``exactly-once`` (default) or ``at-least-once``."""
    opts = _lower(options)
    _check_unknown(opts, _SINK_KEYS, "sink")
    bootstrap, configs = _client_configs(opts)
    delivery = opts.get("delivery", "exactly-once").lower()
    if delivery not in ("exactly-once", "at-least-once"):
        raise OptionError(f"option 'delivery' must be exactly-once or at-least-once, "
                          f"got {delivery!r}")
    url = opts.get("schemaregistryurl", "")
    if url and not url.startswith(("http://", "https://")):
        raise OptionError(f"option 'schemaRegistryUrl' must be an http(s) URL, not {url!r}")
    if url and not opts.get("topic"):
        raise OptionError("option 'schemaRegistryUrl' needs the 'topic' option: the value "
                          "schema is registered under <topic>-value")
    write_id = opts.get("writeid", "")
    if write_id and not all(c.isalnum() or c in "-_." for c in write_id):
        raise OptionError(f"option 'writeId' may hold letters, digits, '-', '_' and '.', "
                          f"not {write_id!r}")
    try:
        sequence = int(opts.get("writesequence", "0"))
    except ValueError as e:
        raise OptionError(f"option 'writeSequence' must be an integer, not "
                          f"{opts['writesequence']!r}") from e
    if sequence < 0 or ("writesequence" in opts and not write_id):
        raise OptionError("option 'writeSequence' must be >= 0 and needs 'writeId'")
    return SinkOptions(bootstrap_servers=bootstrap, topic=opts.get("topic") or None,
                       exactly_once=delivery == "exactly-once", client_configs=configs,
                       schema_registry_url=url, write_id=write_id, write_sequence=sequence)
