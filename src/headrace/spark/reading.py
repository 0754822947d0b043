"""Reading one offset range of one partition on an executor, as Arrow record batches.

This is the task side of the source: ``read_range`` runs inside a Spark task, fetches one
partition from its leader (raw Fetch requests, or a librdkafka consumer on the TLS/SASL
path), and yields the columns the read selected (``select_columns``) for offsets in
``[start, end)`` — fewer rows than offsets where the log has gaps (compaction, transaction
markers, aborted records under read_committed). It blocks until ``end`` is reached, or
raises after ``pollTimeoutMs`` without progress. It commits nothing: Spark's checkpoint
owns the offsets.
"""

from __future__ import annotations

import ctypes
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql.types import StructType

from headrace.spark.errors import DataLossError, OptionError, SparkConnectorError
from headrace.spark.options import SourceOptions

if TYPE_CHECKING:
    from headrace.protocol import columnar
    from headrace.spark.fetcher import Fetched, PartitionFetcher


_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_FIELDS = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
           ("partition", pa.int32()), ("offset", pa.int64()),
           ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
ARROW_SCHEMA = pa.schema(_FIELDS)
ARROW_SCHEMA_HEADERS = pa.schema([*_FIELDS, ("headers", _HEADER_TYPE)])

ROWS_PER_BATCH = 20_000
FETCH_WAIT_MS = 500
EARLIEST_AT_READ = -2
"""A range start meaning "the partition's first offset when the task runs" (new partitions)."""


_SPARK_TYPES = {"key": "binary", "value": "binary", "topic": "string", "partition": "int",
                "offset": "bigint", "timestamp": "timestamp", "timestampType": "int",
                "headers": "array<struct<key:string,value:binary>>"}
_ARROW_TYPES = {f.name: f.type for f in ARROW_SCHEMA_HEADERS}


def select_columns(opts: SourceOptions, schema: StructType) -> SourceOptions:
    """``opts`` for a read declared with ``schema`` (the source's own or the query's).

    A schema naming only some of the source's columns, in any order and with their types
    (``spark.read.format("headrace").schema("value binary")``), makes every batch carry
    just those, and keys, values or headers not named are never copied out of the fetched
    batches: the Python Data Source API cannot prune columns by itself, and every column a
    batch carries is converted for the JVM whether the query uses it or not. A ``headers``
    column is read without ``includeHeaders``. With ``valueSchema`` the columns are the
    events' (``read_events``). Raises ``OptionError`` for an unknown or repeated column, a
    wrong type or a NOT NULL column."""
    names = schema.fieldNames()
    if opts.events is not None:
        expected = opts.events.output_schema().fieldNames()
        if names != expected:
            raise OptionError("with option 'valueSchema' the columns are the events' ("
                              f"{', '.join(expected)}); select columns after load() instead "
                              "of declaring a schema")
        return opts
    if not names:
        raise OptionError("a declared schema must name at least one of the source's columns: "
                          + ", ".join(_SPARK_TYPES))
    for f in schema.fields:
        wanted = _SPARK_TYPES.get(f.name)
        if wanted is None:
            raise OptionError(f"column {f.name!r} is not one of the source's columns: "
                              + ", ".join(_SPARK_TYPES))
        if names.count(f.name) > 1:
            raise OptionError(f"column {f.name!r} is declared twice")
        if f.dataType.simpleString() != wanted:
            raise OptionError(f"column {f.name!r} is {wanted}, not "
                              f"{f.dataType.simpleString()}")
        if not f.nullable:
            raise OptionError(f"column {f.name!r} must be declared nullable, as the "
                              "source's columns are")
    if names == output_schema(opts).names:  # the source's own: every column
        return opts
    return replace(opts, columns=tuple(names))


def output_schema(opts: SourceOptions) -> pa.Schema:
    """The Arrow schema of the batches a read of ``opts`` yields."""
    if opts.columns is None:
        return ARROW_SCHEMA_HEADERS if opts.include_headers else ARROW_SCHEMA
    return pa.schema([(name, _ARROW_TYPES[name]) for name in opts.columns])


def reads_headers(opts: SourceOptions) -> bool:
    return opts.include_headers if opts.columns is None else "headers" in opts.columns


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition; ``start`` may be ``EARLIEST_AT_READ``."""

    topic: str
    partition: int
    start: int
    end: int


def consumer_config(opts: SourceOptions) -> dict[str, Any]:
    return {
        "queued.max.messages.kbytes": 65536,
        # librdkafka otherwise pauses fetching for 1 s whenever its queue is full.
        "fetch.queue.backoff.ms": 10,
        "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 8388608,
        **opts.client_configs,
        "bootstrap.servers": opts.bootstrap_servers,
        # librdkafka wants a group id even for assign(); nothing is ever committed to it.
        "group.id": f"headrace-spark-reader-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "isolation.level": "read_committed" if opts.read_committed else "read_uncommitted",
    }


class _Columns:
    """Row values gathered column by column, turned into one Arrow batch at a time."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.stamps: list[tuple[int, int]] = []  # librdkafka's (type, ms) per record
        self.headers: list[list[dict[str, Any]]] = []

    def clear(self) -> None:
        """Empty the lists in place: the reading loop holds references to them."""
        for column in (self.keys, self.values, self.offsets, self.stamps, self.headers):
            column.clear()

    def batch(self, topic: str, partition: int) -> pa.RecordBatch:
        n = len(self.offsets)
        kinds, millis = zip(*self.stamps, strict=True)
        # librdkafka: 1 create time, 2 log-append time; Kafka (and Spark): 0 and 1.
        types = pc.max_element_wise(pc.subtract(pa.array(kinds, pa.int32()), 1), 0)
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(pa.array(millis, pa.int64()), 1000).cast(
                pa.timestamp("us", tz="UTC")),
            types.cast(pa.int32()),
        ]
        schema = ARROW_SCHEMA
        if self.include_headers:
            arrays.append(pa.array(self.headers, _HEADER_TYPE))
            schema = ARROW_SCHEMA_HEADERS
        self.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(opts: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` in offset order, in Arrow batches.

    Over PLAINTEXT the records are fetched as raw batches and decoded column by column
    (``headrace.spark.fetcher``, ``headrace.protocol.columnar``): one Arrow batch per Fetch
    response. With any other ``kafka.security.protocol``, or ``headrace.reader=librdkafka``,
    a librdkafka consumer reads them, ``ROWS_PER_BATCH`` rows at a time."""
    if opts.raw_fetch:
        yield from _read_fetched(opts, rng)
        return
    consumer = Consumer(consumer_config(opts))
    schema = output_schema(opts)
    try:
        for batch in _read(consumer, opts, rng):
            yield batch if opts.columns is None else pa.RecordBatch.from_arrays(
                [batch.column(name) for name in schema.names], schema=schema)
    finally:
        consumer.close()


_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_malloc_tuned = False


def reuse_freed_memory() -> None:
    """Once per process, with glibc: keep freed blocks of up to 32 MB (Fetch responses,
    decoded columns) in the heap for the next batch instead of unmapping them, and keep up
    to 256 MB of free heap. A fresh page costs a fault on first touch, and on these VMs
    the faults of a 10 MB buffer cost ten times its copy (measured: 135,000 faults and
    0.5 s of CPU per 10M records read, 200 faults with this). Elsewhere: nothing."""
    global _malloc_tuned
    if _malloc_tuned:
        return
    _malloc_tuned = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)
    except (OSError, AttributeError):
        pass


def _read_fetched(opts: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The raw path: while one response is decoded and handed to Spark, the next one is
    already being fetched (the decoder releases the GIL)."""
    # imported here: the compiled scan (numba, ~0.3 CPU s) and the raw Fetch requests
    # (kafka-python) are for the read tasks, not the driver's planning that imports this
    from headrace.protocol import columnar
    from headrace.spark.fetcher import OFFSET_OUT_OF_RANGE, PartitionFetcher

    reuse_freed_memory()
    timeout = opts.poll_timeout_ms / 1000
    fetcher = PartitionFetcher(opts.bootstrap_servers, rng.topic, rng.partition,
                               opts.read_committed, timeout_s=min(timeout, 30.0))
    pool = ThreadPoolExecutor(1, thread_name_prefix="headrace-fetch")
    ahead: Future[Fetched] | None = None
    topic = pa.scalar(rng.topic, pa.string())
    partition = pa.scalar(rng.partition, pa.int32())
    schema = output_schema(opts)
    with_headers = reads_headers(opts)
    with_key, with_value = "key" in schema.names, "value" in schema.names
    with_meta = not {"offset", "timestamp", "timestampType"}.isdisjoint(schema.names)
    position = rng.start
    deadline = time.monotonic() + timeout
    last_problem = ""
    try:
        while position < rng.end:
            if time.monotonic() > deadline:
                raise SparkConnectorError(
                    f"{rng.topic}[{rng.partition}]: no record at offset {position} (reading up "
                    f"to {rng.end}) within kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms}"
                    + (f"; last problem: {last_problem}" if last_problem else ""))
            try:
                if position < 0:  # EARLIEST_AT_READ
                    position = fetcher.earliest()
                    continue
                if ahead is not None:
                    fetched, ahead = ahead.result(), None
                else:
                    fetched = fetcher.fetch(position, FETCH_WAIT_MS)
                if fetched.error_code == OFFSET_OUT_OF_RANGE:
                    position = _after_out_of_range(opts, rng, fetcher, position)
                    continue
            except ConnectionError as e:
                ahead, last_problem = None, str(e)
                time.sleep(0.1)
                continue
            if fetched.error_code:
                raise SparkConnectorError(f"{rng.topic}[{rng.partition}]: fetch at offset "
                                          f"{position} failed with error code "
                                          f"{fetched.error_code}")
            sections, after = columnar.split(fetched.records, position, opts.read_committed,
                                             fetched.aborted)
            if after > position:
                deadline = time.monotonic() + timeout
                if after < rng.end:
                    ahead = pool.submit(fetcher.fetch, after, FETCH_WAIT_MS)
                cols = columnar.decode(sections, position, rng.end, with_headers,
                                       with_key=with_key, with_value=with_value,
                                       with_meta=with_meta)
                position = after
                if len(cols):
                    yield arrow_batch(cols, topic, partition, schema)
            else:
                visible = (fetched.last_stable_offset if opts.read_committed
                           else fetched.high_watermark)
                if not fetched.records and position < visible:
                    # Nothing at or after ``position`` below what a reader of this isolation
                    # level can see: compacted away. Beyond it, the next fetch long-polls.
                    position = visible
    finally:
        if ahead is not None:
            ahead.cancel() or ahead.exception()  # the socket is free once it is done
        pool.shutdown(wait=True)
        fetcher.close()


def _after_out_of_range(opts: SourceOptions, rng: OffsetRange, fetcher: PartitionFetcher,
                        position: int) -> int:
    """Where to go on after OFFSET_OUT_OF_RANGE at ``position``: the log start when
    retention or DeleteRecords removed it (data loss, fatal unless failOnDataLoss=false)."""
    low = fetcher.earliest()
    if position >= low:
        raise SparkConnectorError(
            f"{rng.topic}[{rng.partition}]: offset {position} is beyond the log's end "
            f"(the partition was truncated or recreated)")
    _data_lost(opts, rng, position, low)
    return low


def arrow_batch(cols: columnar.Columns, topic: pa.Scalar, partition: pa.Scalar,
                 schema: pa.Schema) -> pa.RecordBatch:
    """The columns of ``schema`` (``output_schema``), each built only when it is one."""
    return pa.RecordBatch.from_arrays([_column(name, cols, topic, partition)
                                       for name in schema.names], schema=schema)


def _column(name: str, cols: columnar.Columns, topic: pa.Scalar, partition: pa.Scalar
            ) -> pa.Array | None:
    if name in ("topic", "partition"):
        return pa.repeat(topic if name == "topic" else partition, len(cols))
    if name == "timestamp":
        return pc.multiply(cols.timestamp_ms, 1000).cast(pa.timestamp("us", tz="UTC"))
    if name == "timestampType":
        return cols.timestamp_type
    column: pa.Array | None = getattr(cols, name)  # key, value, offset, headers
    return column


def _start_offset(consumer: Consumer, opts: SourceOptions, rng: OffsetRange) -> int:
    try:
        low, _high = consumer.get_watermark_offsets(
            TopicPartition(rng.topic, rng.partition), timeout=opts.poll_timeout_ms / 1000,
            cached=False)
    except KafkaException as e:
        raise SparkConnectorError(
            f"cannot read {rng.topic}[{rng.partition}]: {e.args[0].str()}") from e
    if rng.start == EARLIEST_AT_READ:
        return int(low)
    if rng.start < low:
        _data_lost(opts, rng, rng.start, low)
        return int(low)
    return rng.start


def _data_lost(opts: SourceOptions, rng: OffsetRange, wanted: int, first: int) -> None:
    message = (f"{rng.topic}[{rng.partition}]: offsets {wanted}..{first - 1} are no longer in "
               f"the log (deleted by retention or DeleteRecords) before the query read them")
    if opts.fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to skip lost offsets")


def _read(consumer: Consumer, opts: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    position = _start_offset(consumer, opts, rng)
    if position >= rng.end:
        return
    consumer.assign([TopicPartition(rng.topic, rng.partition, position)])
    cols = _Columns(reads_headers(opts))
    keys, values, offsets, stamps = cols.keys, cols.values, cols.offsets, cols.stamps
    with_headers = cols.include_headers
    end = rng.end
    timeout = opts.poll_timeout_ms / 1000
    deadline = time.monotonic() + timeout
    while position < end:
        # consume() returns early only once it has num_messages, so never ask for more
        # than the range can still hold; gaps (markers, compaction) cost one short wait.
        messages: list[Any] = consumer.consume(num_messages=min(10_000, end - position),
                                               timeout=0.1)
        if not messages:
            if time.monotonic() > deadline:
                raise SparkConnectorError(
                    f"{rng.topic}[{rng.partition}]: no record at offset {position} (reading up "
                    f"to {end}) within kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms}")
            continue
        deadline = time.monotonic() + timeout
        if messages[-1].offset() < end and not any([m.error() for m in messages]):
            # The common case, column by column: a fraction of the per-record loop's cost.
            keys.extend([m.key() for m in messages])
            values.extend([m.value() for m in messages])
            offsets.extend([m.offset() for m in messages])
            stamps.extend([m.timestamp() for m in messages])
            if with_headers:
                headers = cols.headers
                headers.extend([[{"key": k, "value": v} for k, v in (m.headers() or ())]
                                for m in messages])
            position = offsets[-1] + 1
        else:
            position = _read_slowly(consumer, opts, rng, messages, cols, position)
        if len(offsets) >= ROWS_PER_BATCH:
            yield cols.batch(rng.topic, rng.partition)
    if offsets:
        yield cols.batch(rng.topic, rng.partition)


def _read_slowly(consumer: Consumer, opts: SourceOptions, rng: OffsetRange,
                 messages: list[Any], cols: _Columns, position: int) -> int:
    """Take ``messages`` one by one: partition ends, resets, errors, the end of the range.
    Returns the next position (``rng.end`` once the range is complete)."""
    end = rng.end
    for m in messages:
        err = m.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                # Caught up to the end a reader of this isolation level can see; what
                # remains of the range was markers, aborted records or compacted away.
                if m.offset() >= end:
                    return end
                continue
            if err.code() == KafkaError._AUTO_OFFSET_RESET:
                low = _start_offset(consumer, opts,
                                    OffsetRange(rng.topic, rng.partition, position, end))
                consumer.assign([TopicPartition(rng.topic, rng.partition, low)])
                return low
            raise SparkConnectorError(f"{rng.topic}[{rng.partition}]: {err.str()}")
        offset = m.offset()
        if offset >= end:
            return end
        cols.keys.append(m.key())
        cols.values.append(m.value())
        cols.offsets.append(offset)
        cols.stamps.append(m.timestamp())
        if cols.include_headers:
            cols.headers.append([{"key": k, "value": v} for k, v in (m.headers() or ())])
        position = offset + 1
    return position
