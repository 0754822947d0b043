"""Backfills that read the tiered part of a topic straight from the object store.

A batch read given the brokers' store settings (``headrace.remote.storage.*``, see
``options``) splits each partition's range where the tiered part ends. Below that, the
driver lists the partition's segments in the store (``storage.remote_scan``) and plans
Spark partitions of consecutive remote segments, up to ``TASK_BYTES`` each (one per
segment for Kafka's 1 GiB segments; more, split by offsets, with ``minPartitions``); the
tasks run in parallel, each fetching its segments' batches from the store in chunks, with
the next chunks fetched while it decodes,
and decodes them with the columnar scan the broker-fetch path uses
(``protocol.columnar``): CRC checked, control batches dropped and, under
read_committed, the batches of aborted transactions dropped using the segment's own
aborted-transaction index. Above it, tasks fetch the hot tail from the broker as any read
does. The rows are those of a read through the broker: the same offsets, keys, values,
headers and timestamps.

What the driver asks the brokers, through the Kafka protocol: the log start offset
(ListOffsets -2), the latest tiered offset (ListOffsets -5, KIP-1005) and the topic id
(Metadata), which names the partition's objects. Offsets below the log start offset
(DeleteRecords, retention) are never read from the store even if their objects remain;
a segment deleted between planning and reading makes its task read those offsets through
the broker instead; a store that fails is retried until ``kafkaConsumer.pollTimeoutMs``.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from headrace.protocol import columnar
from headrace.spark import metadata
from headrace.spark.errors import SparkConnectorError
from headrace.spark.fetcher import PartitionFetcher
from headrace.spark.metadata import TP
from headrace.spark.options import SourceOptions
from headrace.spark.reading import (
    OffsetRange,
    arrow_batch,
    output_schema,
    read_range,
    reads_headers,
    reuse_freed_memory,
)
from headrace.storage.remote_config import RemoteLogConfig
from headrace.storage.remote_reader import READ_AHEAD_CHUNKS, RemoteReader
from headrace.storage.remote_scan import ColdSpan, aborted_transactions, cold_spans
from headrace.storage.remote_store import (
    RemoteObjectMissingError,
    RemoteStorage,
    RemoteStorageError,
)
from headrace.storage.tiered_log import remote_prefix

CHUNK_BYTES = 8 << 20
"""Bytes per request to the store (and per decoded Arrow batch, roughly)."""
TASK_BYTES = 128 << 20
"""Consecutive remote segments of a partition are read by one task up to this many bytes,
as Spark's file sources pack files into tasks (``spark.sql.files.maxPartitionBytes``):
each Spark task costs a scheduling round trip, worth more than reading small segments."""
T = TypeVar("T")


class ColdPartition(InputPartition):
    """One Spark task's work: consecutive spans of one partition, each in one remote
    segment, read in order."""

    def __init__(self, topic: str, partition: int, spans: tuple[ColdSpan, ...]) -> None:
        super().__init__((topic, partition, spans))
        self.topic = topic
        self.partition = partition
        self.spans = spans


def _packed(tp: TP, spans: list[ColdSpan]) -> list[ColdPartition]:
    """``spans`` (consecutive, of one partition) packed into tasks of up to ``TASK_BYTES``
    of segments (a bigger segment alone)."""
    out: list[ColdPartition] = []
    group: list[ColdSpan] = []
    size = 0
    for span in spans:
        if group and size + span.segment.size > TASK_BYTES:
            out.append(ColdPartition(tp[0], tp[1], tuple(group)))
            group, size = [], 0
        group.append(span)
        size += span.segment.size
    if group:
        out.append(ColdPartition(tp[0], tp[1], tuple(group)))
    return out


def _pieces(span: ColdSpan, parts: int) -> list[ColdSpan]:
    if parts <= 1:
        return [span]
    size = span.end - span.start
    bounds = [span.start + size * i // parts for i in range(parts + 1)]
    return [ColdSpan(span.prefix, span.segment, a, b) for a, b in itertools.pairwise(bounds)
            if b > a]


LATEST_TIERED = -5
"""ListOffsets' "latest tiered" timestamp (KIP-1005, v9+): the highest offset in the store."""


def latest_tiered(opts: SourceOptions, tps: list[TP]) -> dict[TP, int]:
    """The highest offset of each partition in the object store, -1 when none is there (or
    the broker has no tiered storage). A raw ListOffsets v9 at each leader: librdkafka's
    admin client refuses the -5 spec. Retried on fresh metadata for ``metadata.TIMEOUT``."""
    out: dict[TP, int] = {}
    for topic, partition in tps:
        fetcher = PartitionFetcher(opts.bootstrap_servers, topic, partition, False,
                                   timeout_s=metadata.TIMEOUT)
        deadline = time.monotonic() + metadata.TIMEOUT
        try:
            while True:
                try:
                    out[(topic, partition)] = fetcher.list_offset(LATEST_TIERED, version=9)
                    break
                except ConnectionError as e:
                    if time.monotonic() > deadline:
                        raise SparkConnectorError(f"cannot ask the latest tiered offset of "
                                                  f"{topic}[{partition}]: {e}") from e
                    time.sleep(0.2)
        finally:
            fetcher.close()
    return out


def plan_cold(opts: SourceOptions, admin: Any, start: dict[TP, int], end: dict[TP, int]
              ) -> tuple[list[ColdPartition], list[OffsetRange]]:
    """The partitions of a batch read over ``[start, end)`` per topic partition: those
    reading tiered offsets from the store, and the offset ranges left to the broker
    (the hot tails, and anything the store cannot serve). Driver side; blocks."""
    assert opts.remote is not None
    tps = sorted(tp for tp in start if end[tp] > start[tp])
    tiered = latest_tiered(opts, tps)
    cold_tps = [tp for tp in tps if tiered[tp] >= start[tp]]
    first = metadata.earliest(admin, cold_tps)
    ids = metadata.topic_ids(admin, (t for t, _ in cold_tps))
    spans: list[tuple[TP, ColdSpan]] = []
    hot = [OffsetRange(t, p, start[(t, p)], end[(t, p)]) for t, p in tps
           if (t, p) not in cold_tps]
    store = opts.remote.open_store() if cold_tps else None
    try:
        for tp in cold_tps:
            assert store is not None
            lo, hi = max(start[tp], first[tp]), min(end[tp], tiered[tp] + 1)
            prefix = remote_prefix(tp[0], ids[tp[0]], tp[1])
            try:
                found = cold_spans(store, prefix, lo, hi)
            except RemoteObjectMissingError:
                found = []  # deleted since the broker answered: the broker reads it all
            except RemoteStorageError as e:
                raise SparkConnectorError(f"cannot list the tiered segments of {tp[0]}"
                                          f"[{tp[1]}] in the object store: {e}") from e
            spans += [(tp, s) for s in found]
            # Below the log start the broker's answer (data loss) is the one to give.
            broker_from = hi if found else start[tp]
            if start[tp] < lo and found:
                hot.append(OffsetRange(tp[0], tp[1], start[tp], lo))
            if end[tp] > broker_from:
                hot.append(OffsetRange(tp[0], tp[1], broker_from, end[tp]))
    finally:
        if store is not None:
            store.close()
    parts = [part for tp in dict.fromkeys(tp for tp, _ in spans)
             for part in _packed(tp, [s for t, s in spans if t == tp])]
    if opts.min_partitions and len(parts) + len(hot) < opts.min_partitions and spans:
        # More tasks asked for: a span each, split by offsets (the task seeks with the
        # segment's offset index), in proportion to its share of all offsets.
        total = sum(s.end - s.start for _, s in spans) + sum(r.end - r.start for r in hot)
        parts = [ColdPartition(t, p, (piece,)) for (t, p), s in spans
                 for piece in _pieces(s, round(opts.min_partitions * (s.end - s.start)
                                               / total))]
    return parts, hot


def _retrying(opts: SourceOptions, what: str, call: Callable[[], T]) -> T:
    """``call()``, retried while the store fails (not for a missing object) until
    ``kafkaConsumer.pollTimeoutMs``; then ``SparkConnectorError``."""
    deadline = time.monotonic() + opts.poll_timeout_ms / 1000
    pause = 0.1
    while True:
        try:
            return call()
        except RemoteObjectMissingError:
            raise
        except RemoteStorageError as e:
            if time.monotonic() + pause > deadline:
                raise SparkConnectorError(
                    f"{what}: the object store failed for kafkaConsumer.pollTimeoutMs="
                    f"{opts.poll_timeout_ms}: {e}") from e
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


_stores: dict[RemoteLogConfig, RemoteStorage] = {}
_stores_lock = threading.Lock()


def _store(config: RemoteLogConfig) -> RemoteStorage:
    """One store client per Python worker process and settings, kept for the worker's
    life: Spark reuses its Python workers from task to task, and building a boto3 client
    (botocore loads the S3 service model) costs more than fetching a segment."""
    with _stores_lock:
        store = _stores.get(config)
        if store is None:
            store = _stores[config] = config.open_store()
        return store


def read_cold(opts: SourceOptions, part: ColdPartition) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``part``'s spans in offset order, in Arrow batches (one per
    chunk fetched). Runs in a Spark task; blocks on the store."""
    assert opts.remote is not None
    reuse_freed_memory()
    store = _store(opts.remote)
    ahead = ThreadPoolExecutor(1, thread_name_prefix="headrace-cold-read-ahead")
    reader = RemoteReader(store, CHUNK_BYTES, CHUNK_BYTES * (READ_AHEAD_CHUNKS + 2),
                          read_ahead=ahead)
    try:
        for span in part.spans:
            yield from _read_span(opts, part, span, store, reader)
    finally:
        ahead.shutdown(wait=True, cancel_futures=True)


def _read_span(opts: SourceOptions, part: ColdPartition, span: ColdSpan,
               store: RemoteStorage, reader: RemoteReader) -> Iterator[pa.RecordBatch]:
    what = f"{part.topic}[{part.partition}] offsets {span.start}..{span.end - 1}"
    schema = output_schema(opts)
    topic = pa.scalar(part.topic, pa.string())
    partition = pa.scalar(part.partition, pa.int32())
    with_key, with_value = "key" in schema.names, "value" in schema.names
    with_meta = not {"offset", "timestamp", "timestampType"}.isdisjoint(schema.names)
    position = span.start
    try:
        txns = (_retrying(opts, what, lambda: aborted_transactions(store, span))
                if opts.read_committed else [])
        while position < span.end:
            data = _retrying(opts, what, functools.partial(
                reader.read, span.prefix, span.segment, position, CHUNK_BYTES))
            if not data:
                break  # the segment ends before the span: nothing is missing above it
            # the transactions whose abort marker is not behind us (as a Fetch's list)
            aborted = [(pid, first) for pid, first, last in txns if last >= position]
            sections, after = columnar.split(data, position, opts.read_committed, aborted)
            if after <= position:
                raise SparkConnectorError(f"{what}: no whole record batch at offset "
                                          f"{position} in {span.segment.segment_id}")
            cols = columnar.decode(sections, position, span.end, reads_headers(opts),
                                   with_key=with_key, with_value=with_value,
                                   with_meta=with_meta)
            position = after
            if len(cols):
                yield arrow_batch(cols, topic, partition, schema)
    except RemoteObjectMissingError:
        # Deleted by retention since planning: the broker answers for these offsets.
        yield from read_range(opts, OffsetRange(part.topic, part.partition, position,
                                                span.end))
