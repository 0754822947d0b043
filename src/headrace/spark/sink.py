"""The write side of ``format("headrace")``: each Spark task produces its rows to the log.

Exactly-once (``delivery=exactly-once``, the default). Spark may run a task of a
micro-batch more than once: a retry after an executor dies, a speculative copy, or the
whole batch again when the driver restarts from its checkpoint. Each run of partition
``p`` of batch ``n`` of query ``q`` therefore:

1. opens a transactional producer with ``transactional.id = headrace-sink-<q>-<p>``;
   ``init_transactions`` fences every earlier run of the same task and aborts what it
   left open;
2. reads the sink's marker: the committed offset of consumer group ``headrace-sink-<q>-<p>``
   on the marker topic (read with ``require_stable``), which holds ``last batch + 1``;
   if it is past ``n``, the rows are already in the log and the task writes nothing;
3. otherwise produces its rows and moves the marker to ``n + 1`` *in the same
   transaction* (``send_offsets_to_transaction``), then commits.

So rows and marker become visible together or not at all; a read_committed consumer sees
each row once. The design needs nothing but the Kafka protocol, so it holds against any
Kafka-compatible broker with transactions. Batch writes (``df.write``) use the same
protocol with a write id drawn on the driver and batch 0.

How long a query may stay stopped: the markers are committed offsets of groups nobody
joins, which a broker deletes ``offsets.retention.minutes`` after their last commit (7
days by default, in headrace as in Kafka). A query restarted within that time is
exactly-once; one stopped longer has lost its markers, so the single batch its
checkpoint replays on restart may be written a second time (never more, never lost).
Raise ``offsets.retention.minutes`` (``headrace broker --offsets-retention-minutes``)
when longer stops are expected.

With ``schemaRegistryUrl`` the ``value`` column is a struct written as Avro in the
registry's wire format under the subject ``<topic>-value`` (``registry_values``).

At-least-once (``delivery=at-least-once``) uses an idempotent producer and flushes before
the task ends: no loss, but a re-run task writes its rows again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from headrace.spark import metadata
from headrace.spark.errors import OptionError, SinkError, SparkConnectorError
from headrace.spark.options import SinkOptions
from headrace.spark.registry_values import AvroValueEncoder, avro_schema_of, register_schema

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")
log = logging.getLogger("headrace.spark.sink")
MARKER_TOPIC = "_headrace-sink-commits"
TXN_TIMEOUT_MS = 120_000
"""Default ``transaction.timeout.ms`` (``kafka.transaction.timeout.ms`` overrides it): a
task's transaction must fit in it; a transaction left open by a task that never runs
again holds read_committed readers of its partitions back for at most this long."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What one task did: rows written, or ``skipped`` when its batch was already in."""

    partition: int
    rows: int
    skipped: bool


def check_schema(opts: SinkOptions, schema: StructType) -> SinkOptions:
    """Raise ``OptionError`` unless the DataFrame has what Spark's Kafka sink requires.
    With a registry, register the struct value's Avro schema and return the options with
    its id (driver side, at query start)."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("the DataFrame written needs a 'value' column (string or binary)")
    if opts.schema_registry_url:
        value = fields["value"]
        if not isinstance(value, StructType):
            raise OptionError("with 'schemaRegistryUrl' the 'value' column must be a struct "
                              f"(written as Avro), not {value.simpleString()}")
        avro = json.dumps(avro_schema_of(value))
        schema_id = register_schema(opts.schema_registry_url, f"{opts.topic}-value", avro)
        opts = replace(opts, value_schema=avro, value_schema_id=schema_id)
        fields.pop("value")
    for name in ("key", "value", "topic"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise OptionError(f"column {name!r} must be string or binary, not "
                              f"{fields[name].simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError("column 'topic' must be a string")
    if opts.topic is None and "topic" not in fields:
        raise OptionError("name the topic: option 'topic' or a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError("column 'partition' must be an int")
    return opts


# The marker topics known to exist, per cluster (bootstrap servers): PySpark builds a new
# StreamWriter for every micro-batch, and asking the controller each time would tie every
# batch commit to whichever broker looks like the controller (a dead one stalls it).
_MARKER_TOPIC_SEEN: set[str] = set()


def ensure_marker_topic(opts: SinkOptions) -> None:
    """Create the marker topic if it does not exist (1 partition, compacted, the cluster's
    default replication factor). Driver side; asks the cluster once per process: the
    metadata of any live broker first, CreateTopics only when the topic is missing, each
    retried through a failover (``metadata.with_retries``). It never holds records: only
    the consumer-group offsets the sink commits on its partition 0."""
    if opts.bootstrap_servers in _MARKER_TOPIC_SEEN:
        return
    admin = metadata.admin_client(opts.bootstrap_servers, opts.client_configs)

    def listed() -> bool:
        topic = admin.list_topics(MARKER_TOPIC, timeout=metadata.TIMEOUT).topics[MARKER_TOPIC]
        return topic.error is None and bool(topic.partitions)

    def create() -> None:
        futures = admin.create_topics([NewTopic(MARKER_TOPIC, num_partitions=1,
                                                replication_factor=-1,
                                                config={"cleanup.policy": "compact"})],
                                      request_timeout=metadata.TIMEOUT)
        try:
            futures[MARKER_TOPIC].result()
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    try:
        if not metadata.with_retries(f"describe {MARKER_TOPIC}", listed):
            metadata.with_retries(f"create the sink's marker topic {MARKER_TOPIC}", create)
    except SparkConnectorError as e:
        raise SinkError(str(e)) from e
    _MARKER_TOPIC_SEEN.add(opts.bootstrap_servers)


def _retrying(what: str, call: Callable[[], T]) -> T:
    """A transactional producer's call, repeated while it fails with a retriable error (a
    coordinator that moved or timed out; librdkafka's contract allows the repeat) until
    ``metadata.RETRY_DEADLINE``. An abortable or fatal error is raised at once."""
    end = time.monotonic() + metadata.RETRY_DEADLINE
    while True:
        try:
            return call()
        except KafkaException as e:
            err = e.args[0]
            if not err.retriable() or err.txn_requires_abort() or time.monotonic() > end:
                raise
            log.info("%s retried: %s", what, err.str())
        time.sleep(0.2)


def _rows(opts: SinkOptions, batches: Iterator[pa.RecordBatch]
          ) -> Iterator[tuple[str, Any, Any, int | None, Any]]:
    """(topic, key, value, partition, headers) per row; strings become UTF-8 bytes, struct
    values Avro (``opts.value_schema_id``)."""
    encode = None
    if opts.value_schema_id is not None:
        encode = AvroValueEncoder(opts.value_schema, opts.value_schema_id).encode
    for batch in batches:
        names = batch.schema.names
        n = batch.num_rows
        cols = {name: batch.column(name).to_pylist() for name in names}
        values = cols["value"] if encode is None else [encode(v) for v in cols["value"]]
        keys = cols.get("key", [None] * n)
        topics = [opts.topic] * n if opts.topic else cols["topic"]
        parts = cols.get("partition", [None] * n)
        headers = cols.get("headers", [None] * n)
        for topic, key, value, part, hdrs in zip(topics, keys, values, parts, headers, strict=True):
            if topic is None:
                raise SinkError("a row has a null topic and no 'topic' option is set")
            if hdrs is not None:
                hdrs = [(h["key"], h["value"]) for h in hdrs]
            yield topic, key, value, part, hdrs


class _Delivery:
    """Records the first failed delivery of a producer (librdkafka reports it in poll)."""

    def __init__(self) -> None:
        self.error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None and self.error is None:
            self.error = err


def _produce_all(producer: Producer, opts: SinkOptions, batches: Iterator[pa.RecordBatch],
                 delivery: _Delivery) -> int:
    n = 0
    produce = producer.produce
    for topic, key, value, part, hdrs in _rows(opts, batches):
        kwargs: dict[str, Any] = {}
        if part is not None:
            kwargs["partition"] = part
        if hdrs:
            kwargs["headers"] = hdrs
        while True:
            try:
                produce(topic, value, key, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        n += 1
        if delivery.error is not None:
            raise SinkError(f"delivery failed: {delivery.error.str()}")
    return n


def _producer_config(opts: SinkOptions, delivery: _Delivery,
                     eager: bool = False) -> dict[str, Any]:
    """``eager``: for a producer that lives one task. librdkafka then connects to the
    brokers it learns from the bootstrap metadata at once (``enable.sparse.connections=
    false``), not when a request needs one; the producer id a transactional producer must
    get first otherwise waits for a reconnect backoff or its 500 ms PID timer
    (init_transactions: 54 ms, sometimes 500, -> 2.5 ms here). A long-lived producer keeps
    sparse connections, so it does not hold idle ones (and log their failures)."""
    defaults: dict[str, Any] = {"linger.ms": 5, "batch.num.messages": 10_000,
                                "compression.type": "lz4"}
    if eager:
        defaults["enable.sparse.connections"] = False
    return {**defaults, **opts.client_configs, "bootstrap.servers": opts.bootstrap_servers,
            "enable.idempotence": True, "acks": "all", "on_delivery": delivery}


# One idempotent producer per worker process and settings: a new one holds its first
# send until it has a producer id (~0.5 s), which would be paid by every task.
_PRODUCERS: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Producer, _Delivery]] = {}


def write_at_least_once(opts: SinkOptions, batches: Iterator[pa.RecordBatch],
                        partition: int) -> SinkCommit:
    """Produce and flush; raises ``SinkError`` if any row was not acknowledged."""
    key = (opts.bootstrap_servers, tuple(sorted(opts.client_configs.items())))
    if key not in _PRODUCERS:
        delivery = _Delivery()
        _PRODUCERS[key] = (Producer(_producer_config(opts, delivery)), delivery)
    producer, delivery = _PRODUCERS[key]
    delivery.error = None
    n = _produce_all(producer, opts, batches, delivery)
    remaining = producer.flush(metadata.TIMEOUT * 4)
    if remaining or delivery.error is not None:
        reason = delivery.error.str() if delivery.error else f"{remaining} rows unacknowledged"
        raise SinkError(f"task for partition {partition} failed: {reason}")
    return SinkCommit(partition, n, False)


def write_exactly_once(opts: SinkOptions, batches: Iterator[pa.RecordBatch], write_id: str,
                       partition: int, sequence: int) -> SinkCommit:
    """Write this task's rows and advance its marker to ``sequence + 1`` atomically, unless
    the marker shows ``sequence`` already committed. Blocks; raises ``SinkError``."""
    txn_id = f"headrace-sink-{write_id}-{partition}"
    delivery = _Delivery()
    producer = Producer({"transaction.timeout.ms": TXN_TIMEOUT_MS,
                         **_producer_config(opts, delivery, eager=True),
                         "transactional.id": txn_id})
    marker = Consumer({**opts.client_configs, "bootstrap.servers": opts.bootstrap_servers,
                       "group.id": txn_id, "enable.auto.commit": False,
                       "isolation.level": "read_committed"})
    try:
        _retrying("init_transactions", lambda: producer.init_transactions(metadata.TIMEOUT))
        done = _retrying("reading the batch marker", lambda: marker.committed(
            [TopicPartition(MARKER_TOPIC, 0)], timeout=metadata.TIMEOUT))
        if done[0].offset > sequence:
            return SinkCommit(partition, 0, True)
        producer.begin_transaction()
        try:
            n = _produce_all(producer, opts, batches, delivery)
            _retrying("send_offsets_to_transaction", lambda: producer.send_offsets_to_transaction(
                [TopicPartition(MARKER_TOPIC, 0, sequence + 1)],
                marker.consumer_group_metadata(), metadata.TIMEOUT))
            _retrying("commit_transaction",
                      lambda: producer.commit_transaction(metadata.TIMEOUT * 4))
        except BaseException:
            # Fenced or timed out: the coordinator aborts it anyway.
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(metadata.TIMEOUT)
            raise
        return SinkCommit(partition, n, False)
    except KafkaException as e:
        raise SinkError(f"transaction {txn_id} for batch {sequence} failed: "
                        f"{e.args[0].str()}") from e
    finally:
        marker.close()


def _task() -> Any:
    ctx = TaskContext.get()
    if ctx is None:
        raise SinkError("the headrace sink must run inside a Spark task")
    return ctx


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("headrace")``: one write id per job, so task retries are skipped;
    with the ``writeId``/``writeSequence`` options, re-runs of the same write are skipped
    too (``foreachBatch(lambda df, n: df.write...option("writeId", q)
    .option("writeSequence", n))`` is then exactly-once, as the streaming sink)."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        opts = check_schema(opts, schema)
        self.opts = opts
        self.write_id = opts.write_id or uuid.uuid4().hex
        if opts.exactly_once:
            ensure_marker_topic(opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        partition = _task().partitionId()
        if not self.opts.exactly_once:
            return write_at_least_once(self.opts, iterator, partition)
        return write_exactly_once(self.opts, iterator, self.write_id, partition,
                                  self.opts.write_sequence)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("headrace")``: keyed by the query id, which survives
    restarts from the checkpoint, and the micro-batch id Spark passes to each task."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        opts = check_schema(opts, schema)
        self.opts = opts
        if opts.exactly_once:
            ensure_marker_topic(opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        ctx = _task()
        partition = ctx.partitionId()
        if not self.opts.exactly_once:
            return write_at_least_once(self.opts, iterator, partition)
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            raise SinkError("the streaming sink found no query id / batch id in its task")
        return write_exactly_once(self.opts, iterator, query_id, partition, int(batch_id))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task committed its own transaction already; nothing is left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Open transactions of failed tasks are aborted when the task runs again (fencing)
        or by the coordinator's transaction timeout."""
