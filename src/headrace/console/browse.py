"""Reading messages for the browser: a bounded scan with filters, and value decoding.

A search reads each chosen partition from its start position (an offset, a time through
ListOffsets by timestamp; without one, the log start when there is a filter, else ``limit``
records before the end), stops at the end offsets
it saw when it began (a search never chases a live producer) or after ``scan`` records, and
keeps the records that match every filter. Values in the schema registry's wire format
(magic byte 0, a 4-byte schema id) are decoded with their writer's schema (Avro) or shown
as JSON (JSON Schema); other values are shown as JSON when they parse, as text when they
are UTF-8, as hex otherwise.
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import fastavro
import httpx
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from headrace.ops.clients import client_settings
from headrace.ops.errors import InvalidInputError, OpsError, UnknownTopicError

MAX_SCAN = 5_000_000


@dataclass(frozen=True)
class Search:
    """What to look for; ``header`` is ``name`` or ``name=value``; empty filters match all."""

    partition: int | None = None
    offset: int | None = None
    from_time_ms: int | None = None
    key: str = ""
    value: str = ""
    header: str = ""
    limit: int = 50
    scan: int = 100_000

    def __post_init__(self) -> None:
        if self.offset is not None and self.offset < 0:
            raise InvalidInputError(f"offset must not be negative, got {self.offset}")
        if not 1 <= self.limit <= 1000:
            raise InvalidInputError(f"limit must be 1-1000, got {self.limit}")
        if not 1 <= self.scan <= MAX_SCAN:
            raise InvalidInputError(f"scan must be 1-{MAX_SCAN}, got {self.scan}")

    def matches(self, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes | None]]) -> bool:
        if self.key and (key is None or self.key.encode() not in key):
            return False
        if self.value and (value is None or self.value.encode() not in value):
            return False
        if self.header:
            name, sep, wanted = self.header.partition("=")
            found = [v for k, v in headers if k == name]
            if not found or (sep and not any(v is not None and wanted.encode() in v
                                              for v in found)):
                return False
        return True


@dataclass(frozen=True)
class Shown:
    """One record as the browser shows it."""

    partition: int
    offset: int
    timestamp_ms: int
    key: str
    value: str
    value_kind: str  # json, avro, text, hex, null
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class SearchResult:
    records: list[Shown]
    scanned: int
    exhausted: bool  # every chosen partition was read to its end offset


class Decoder:
    """Turns bytes into text; schemas come from the registry at ``registry_url`` (cached)."""

    def __init__(self, registry_url: str = "") -> None:
        self.registry_url = registry_url.rstrip("/")
        self._schemas: dict[int, tuple[str, Any]] = {}

    def text(self, data: bytes | None) -> tuple[str, str]:
        if data is None:
            return "", "null"
        if self.registry_url and len(data) >= 5 and data[0] == 0:
            decoded = self._registry(data)
            if decoded is not None:
                return decoded
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return data.hex(" "), "hex"
        try:
            return json.dumps(json.loads(text), indent=1, sort_keys=True), "json"
        except ValueError:
            return text, "text"

    def _registry(self, data: bytes) -> tuple[str, str] | None:
        schema_id = int.from_bytes(data[1:5], "big")
        entry = self._schemas.get(schema_id)
        if entry is None:
            try:
                r = httpx.get(f"{self.registry_url}/schemas/ids/{schema_id}", timeout=5)
            except httpx.HTTPError:
                return None
            if r.status_code != 200:
                return None
            doc = r.json()
            kind = doc.get("schemaType", "AVRO")
            schema: Any = json.loads(doc["schema"])
            parsed: Any = fastavro.parse_schema(schema) if kind == "AVRO" else None
            entry = self._schemas[schema_id] = (kind, parsed)
        kind, parsed = entry
        try:
            if kind == "AVRO":
                value = fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed, None)
                return json.dumps(value, indent=1, sort_keys=True, default=str), "avro"
            if kind == "JSON":
                return json.dumps(json.loads(data[5:]), indent=1, sort_keys=True), "json"
        except (ValueError, EOFError, TypeError, IndexError):
            return None
        return None


def _consumer(bootstrap_servers: str) -> Consumer:
    return Consumer({**client_settings(), "bootstrap.servers": bootstrap_servers,
                     "group.id": f"headrace-console-{uuid.uuid4().hex}",
                     "enable.auto.commit": False, "enable.partition.eof": True,
                     "fetch.wait.max.ms": 50, "log_level": 3})


def search(bootstrap_servers: str, topic: str, query: Search, decoder: Decoder) -> SearchResult:
    """Run ``query`` on ``topic``. Blocks (seconds at most for ``scan`` records);
    ``UnknownTopicError`` for a topic or partition that does not exist."""
    consumer = _consumer(bootstrap_servers)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        partitions = sorted(meta.partitions)
        if query.partition is not None:
            if query.partition not in meta.partitions:
                raise UnknownTopicError(f"topic {topic!r} has no partition {query.partition}")
            partitions = [query.partition]
        ends: dict[int, int] = {}
        starts: dict[int, int] = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            starts[p], ends[p] = int(low), int(high)
        if query.from_time_ms is not None:
            found = consumer.offsets_for_times([TopicPartition(topic, p, query.from_time_ms)
                                                for p in partitions], timeout=10)
            begin = {tp.partition: (tp.offset if tp.offset >= 0 else ends[tp.partition])
                     for tp in found}
        elif query.offset is not None:
            begin = {p: min(max(query.offset, starts[p]), ends[p]) for p in partitions}
        elif query.key or query.value or query.header:  # a search: from the log start
            begin = dict(starts)
        else:  # a look: the newest ``limit`` records of each partition
            begin = {p: max(starts[p], ends[p] - query.limit) for p in partitions}
        todo = {p for p in partitions if begin[p] < ends[p]}
        consumer.assign([TopicPartition(topic, p, begin[p]) for p in todo])
        records: list[Shown] = []
        scanned = 0
        while todo and scanned < query.scan and len(records) < query.limit:
            # poll waits for the first record; consume(..., 0) takes what else has arrived
            # (consume with a timeout would wait for a full batch)
            first = consumer.poll(5.0)
            if first is None:
                break
            batch = [first, *consumer.consume(499, 0)]
            for m in batch:
                err = m.error()
                p = m.partition() or 0
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        todo.discard(p)
                        continue
                    raise OpsError(f"reading {topic}[{p}]: {err.str()}")
                offset = m.offset() or 0
                if p not in todo or offset >= ends[p]:
                    todo.discard(p)
                    continue
                scanned += 1
                if offset + 1 >= ends[p]:
                    todo.discard(p)
                if query.matches(m.key(), m.value(), headers_of(m)) \
                        and len(records) < query.limit:
                    records.append(show(m, decoder))
        records.sort(key=lambda r: (r.timestamp_ms, r.partition, r.offset))
        return SearchResult(records, scanned, not todo)
    except KafkaException as e:
        raise OpsError(f"reading {topic}: {e.args[0].str()}") from e
    finally:
        consumer.close()


def headers_of(m: Any) -> list[tuple[str, bytes | None]]:
    """A message's headers as (name, bytes) pairs."""
    return [(str(k), v if v is None or isinstance(v, bytes) else str(v).encode())
            for k, v in (m.headers() or [])]


def show(m: Any, decoder: Decoder) -> Shown:
    """A consumed message as the browser shows it."""
    key, _ = decoder.text(m.key())
    value, kind = decoder.text(m.value())
    return Shown(m.partition() or 0, m.offset() or 0, m.timestamp()[1], key, value, kind,
                 [(k, decoder.text(v)[0]) for k, v in headers_of(m)])


def oldest_timestamp(bootstrap_servers: str, topic: str, partitions: list[int]) -> int | None:
    """The timestamp (ms) of the oldest record still in ``topic`` (the retention window's
    start), or None for an empty topic."""
    consumer = _consumer(bootstrap_servers)
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])  # OFFSET_BEGINNING
        oldest: int | None = None
        ended: set[int] = set()
        for _ in range(50):
            for m in consumer.consume(len(partitions), 0.5):
                p = m.partition() or 0
                if p in ended:
                    continue
                ended.add(p)
                if m.error() is None:
                    ts = m.timestamp()[1]
                    oldest = ts if oldest is None else min(oldest, ts)
                    consumer.incremental_unassign([TopicPartition(topic, p)])
            if len(ended) == len(partitions):
                break
        return oldest
    finally:
        consumer.close()


def record_timestamp(bootstrap_servers: str, topic: str, partition: int,
                     offset: int) -> int | None:
    """The timestamp (ms) of the record at ``offset`` (or the first after it)."""
    consumer = _consumer(bootstrap_servers)
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        for m in consumer.consume(1, 5.0):
            if m.error() is None:
                return int(m.timestamp()[1])
        return None
    finally:
        consumer.close()


def tail_consumer(bootstrap_servers: str, topic: str) -> Consumer:
    """A consumer positioned at the end of every partition of ``topic`` (the caller closes
    it); ``UnknownTopicError`` if there is no such topic."""
    consumer = _consumer(bootstrap_servers)
    meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        consumer.close()
        raise UnknownTopicError(f"unknown topic {topic!r}")
    consumer.assign([TopicPartition(topic, p, -1) for p in meta.partitions])  # OFFSET_END
    return consumer
