"""The read side of ``format("headrace")``: planning on the driver, reading in tasks.

Offsets in Spark's checkpoint are ``{"topic": {"partition": next_offset}}``, the first
offset the next micro-batch reads, as in Spark's Kafka source. A micro-batch is one
``OffsetRange`` per partition with new data; reading happens in ``reading.read_range``.
With read_committed (the default) a batch ends at each partition's last stable offset, so
no task ever waits for an open transaction.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from headrace.spark import metadata
from headrace.spark.errors import DataLossError, OptionError, SparkConnectorError
from headrace.spark.metadata import TP
from headrace.spark.options import EARLIEST, LATEST, SinkOptions, SourceOptions
from headrace.spark.reading import EARLIEST_AT_READ, OffsetRange, read_range
from headrace.spark.sink import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    ensure_marker_topic,
    write_exactly_once,
)

if TYPE_CHECKING:
    import pyarrow as pa

# Imported where they are used, not here: the tiered part of a backfill (headrace.spark.cold:
# the store's clients, the compiled scan) and the events' parser (pyarrow's compute and
# JSON reader). This module is imported by every Python worker of a query, most of which
# only plan, and a worker pays for each module it imports (see headrace.spark.daemon).

log = logging.getLogger(__name__)


class RangePartition(InputPartition):
    """One Spark task's work: an ``OffsetRange``."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.rng = rng


def _split(rng: OffsetRange, parts: int) -> list[OffsetRange]:
    if parts <= 1 or rng.start < 0:
        return [rng]
    size = rng.end - rng.start
    bounds = [rng.start + size * i // parts for i in range(parts + 1)]
    return [OffsetRange(rng.topic, rng.partition, a, b) for a, b in itertools.pairwise(bounds)
            if b > a]


def plan(ranges: list[OffsetRange], min_partitions: int | None) -> list[RangePartition]:
    """Spark partitions for ranges: one per range, or more when ``minPartitions`` asks for
    more tasks than ranges (the biggest ranges are split, as in Spark's Kafka source)."""
    ranges = [r for r in ranges if r.start == EARLIEST_AT_READ or r.end > r.start]
    if min_partitions and len(ranges) < min_partitions:
        total = sum(r.end - r.start for r in ranges if r.start >= 0) or 1
        ranges = [piece for r in ranges
                  for piece in _split(r, max(1, round(min_partitions * (r.end - r.start) / total)))]
    return [RangePartition(r) for r in ranges]


def resolve_start(opts: SourceOptions, admin: Any, tps: list[TP]) -> dict[TP, int]:
    """Where a new query (or a batch read) starts, per partition: from ``startingOffsets``,
    ``startingTimestamp`` or ``startingOffsetsByTimestamp``. Raises ``OptionError`` for a
    partition the options name that does not exist, or a timestamp with no offset when
    ``startingOffsetsByTimestampStrategy`` is error."""
    if opts.starting_timestamps is not None:
        ts = opts.starting_timestamps
        wanted = ({tp: ts for tp in tps} if isinstance(ts, int) else
                  {(t, p): v for t, parts in ts.items() for p, v in parts.items()})
        _check_named(wanted, tps, "startingOffsetsByTimestamp")
        found = metadata.for_timestamps(admin, wanted)
        ends = metadata.latest(admin, tps, opts.read_committed)
        out: dict[TP, int] = {}
        for tp in tps:
            offset = found.get(tp, -1)
            if offset < 0:
                if opts.timestamp_strategy == "error" and tp in wanted:
                    raise OptionError(f"no record at or after timestamp {wanted[tp]} in "
                                      f"{tp[0]}[{tp[1]}]; set startingOffsetsByTimestampStrategy"
                                      "=latest to start at the end instead")
                offset = ends[tp]
            out[tp] = offset
        return out
    spec = opts.starting
    if isinstance(spec, dict):
        named = {(t, p): o for t, parts in spec.items() for p, o in parts.items()}
        _check_named(named, tps, "startingOffsets")
        lookup = metadata.latest(admin, tps, opts.read_committed)
        first = metadata.earliest(admin, tps)
        out = {}
        for tp in tps:
            o = named.get(tp, LATEST)
            out[tp] = first[tp] if o == EARLIEST else lookup[tp] if o == LATEST else o
        return out
    if spec == EARLIEST:
        return metadata.earliest(admin, tps)
    return metadata.latest(admin, tps, opts.read_committed)


def _check_named(named: dict[TP, int], tps: list[TP], option: str) -> None:
    missing = sorted(set(named) - set(tps))
    if missing:
        raise OptionError(f"option {option!r} names partitions that do not exist or are not "
                          f"subscribed: {', '.join(f'{t}[{p}]' for t, p in missing)}")


def read_task(opts: SourceOptions, partition: InputPartition, batch_write_id: str | None
              ) -> Iterator[pa.RecordBatch]:
    """What a read task yields: raw records, or typed events (``opts.events``), whose bad
    records go to the dead-letter topic once the range is read. ``batch_write_id`` is the
    driver-drawn id of a batch read; a stream uses its query id and micro-batch id."""
    if isinstance(partition, RangePartition):
        records = read_range(opts, partition.rng)
    else:  # a ColdPartition, which only a batch read of tiered storage plans
        from headrace.spark.cold import ColdPartition, read_cold

        assert isinstance(partition, ColdPartition)
        records = read_cold(opts, partition)
    if opts.events is None:
        yield from records
        return
    from headrace.spark.event_parser import EventParser, dead_letter_batches

    parser = EventParser(opts.events)
    dead: list[tuple[bytes | None, bytes | None, list[Any]]] = []
    for raw in records:
        good, bad = parser.parse(raw)
        dead.extend(bad)
        if good.num_rows:
            yield good
    if not dead:
        return
    ctx = TaskContext.get()
    if ctx is None:
        raise SparkConnectorError("the headrace source must run inside a Spark task")
    if batch_write_id is not None:
        write_id, sequence = batch_write_id, 0
    else:
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            raise SparkConnectorError("the stream's read task found no query id / batch id")
        write_id, sequence = f"{query_id}-dlq-{_source_tag(opts)}", int(batch_id)
    sink = SinkOptions(opts.bootstrap_servers, opts.events.dead_letter_topic, True,
                       opts.client_configs)
    write_exactly_once(sink, dead_letter_batches(dead), write_id, ctx.partitionId(), sequence)


def _source_tag(opts: SourceOptions) -> str:
    """Tells two event sources of one query apart in their dead-letter transaction ids."""
    assert opts.events is not None
    text = f"{opts.subscription}|{opts.events.dead_letter_topic}"
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def _prepare_dead_letters(opts: SourceOptions) -> None:
    if opts.events is not None:
        ensure_marker_topic(SinkOptions(opts.bootstrap_servers, opts.events.dead_letter_topic,
                                        True, opts.client_configs))


class BatchReader(DataSourceReader):
    """``spark.read.format("headrace")``: a fixed range from start to ``endingOffsets``."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.write_id = uuid.uuid4().hex
        _prepare_dead_letters(opts)

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        admin = metadata.admin_client(opts.bootstrap_servers, opts.client_configs)
        tps = metadata.topic_partitions(admin, opts.subscription)
        start = resolve_start(opts, admin, tps)
        end = metadata.latest(admin, tps, opts.read_committed)
        if opts.ending_timestamp is not None:
            at = metadata.for_timestamps(admin, {tp: opts.ending_timestamp for tp in tps})
            end = {tp: end[tp] if at[tp] < 0 else at[tp] for tp in tps}
        elif isinstance(opts.ending, dict):
            named = {(t, p): o for t, parts in opts.ending.items() for p, o in parts.items()}
            _check_named(named, tps, "endingOffsets")
            end = {tp: end[tp] if named.get(tp, LATEST) == LATEST else named[tp] for tp in tps}
        if opts.remote is not None:
            from headrace.spark.cold import plan_cold

            cold, hot = plan_cold(opts, admin, start, end)
            return [*cold, *plan(hot, opts.min_partitions and max(
                opts.min_partitions - len(cold), 1))]
        return plan([OffsetRange(t, p, start[(t, p)], end[(t, p)]) for t, p in tps],
                    opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(self.opts, partition, self.write_id)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("headrace")``.

    Called on the driver: ``initialOffset`` once for a new query, then per trigger
    ``latestOffset(start, limit)`` (which discovers new partitions, checks for data loss
    and applies ``maxOffsetsPerTrigger``) and ``partitions``; ``read`` runs in tasks.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._admin: Any = None
        self._latest: dict[TP, int] = {}
        self._available_now: dict[TP, int] | None = None
        _prepare_dead_letters(opts)

    @property
    def admin(self) -> Any:
        if self._admin is None:
            self._admin = metadata.admin_client(self.opts.bootstrap_servers,
                                                self.opts.client_configs)
        return self._admin

    def initialOffset(self) -> dict[str, Any]:
        tps = metadata.topic_partitions(self.admin, self.opts.subscription)
        return metadata.to_json(resolve_start(self.opts, self.admin, tps))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = metadata.topic_partitions(self.admin, self.opts.subscription)
        self._available_now = metadata.latest(self.admin, tps, self.opts.read_committed)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = metadata.from_json(start)
        tps = metadata.topic_partitions(self.admin, self.opts.subscription)
        self._check_gone(begin, tps)
        latest = metadata.latest(self.admin, tps, self.opts.read_committed)
        self._latest = latest
        target = dict(latest)
        if self._available_now is not None:
            target = {tp: min(o, self._available_now.get(tp, begin.get(tp, 0)))
                      for tp, o in target.items()}
        self._check_retention(begin, tps)
        # New partitions (absent from ``begin``) start at their first offset.
        first = {tp: 0 for tp in tps if tp not in begin}
        if first:
            first = metadata.earliest(self.admin, list(first))
        origin = {tp: begin.get(tp, first.get(tp, 0)) for tp in tps}
        for tp in tps:
            if target[tp] < origin[tp]:
                self._lost(f"{tp[0]}[{tp[1]}]: the log now ends at {target[tp]}, before offset "
                           f"{origin[tp]} the query had reached (topic recreated?)")
                origin[tp] = target[tp]
        if isinstance(limit, ReadMaxRows):
            target = _rate_limit(origin, target, limit.max_rows)
        return metadata.to_json({tp: max(target[tp], origin[tp]) if tp in begin else target[tp]
                                 for tp in tps})

    def _check_gone(self, begin: dict[TP, int], tps: list[TP]) -> None:
        gone = sorted(set(begin) - set(tps))
        if gone:
            self._lost("partitions no longer exist (topic deleted?): "
                       + ", ".join(f"{t}[{p}]" for t, p in gone))

    def _check_retention(self, begin: dict[TP, int], tps: list[TP]) -> None:
        known = [tp for tp in tps if tp in begin]
        for tp, first in metadata.earliest(self.admin, known).items():
            if begin[tp] < first:
                self._lost(f"{tp[0]}[{tp[1]}]: offsets {begin[tp]}..{first - 1} were deleted "
                           "(retention or DeleteRecords) before the query read them")

    def _lost(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(message + "; set failOnDataLoss=false to continue without them")
        log.warning("data loss ignored (failOnDataLoss=false): %s", message)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return metadata.to_json(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = metadata.from_json(start)
        until = metadata.from_json(end)
        ranges = [OffsetRange(t, p, begin.get((t, p), EARLIEST_AT_READ), o)
                  for (t, p), o in sorted(until.items())]
        return plan(ranges, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(self.opts, partition, None)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in a consumer group."""

    def stop(self) -> None:
        self._admin = None


def _rate_limit(origin: dict[TP, int], target: dict[TP, int], limit: int) -> dict[TP, int]:
    """Cap the total offsets of a trigger at ``limit``, shared in proportion to each
    partition's backlog (largest remainders get the leftover), so no partition starves."""
    backlog = {tp: max(target[tp] - origin[tp], 0) for tp in target}
    total = sum(backlog.values())
    if total <= limit:
        return target
    shares = {tp: limit * n / total for tp, n in backlog.items()}
    take = {tp: int(s) for tp, s in shares.items()}
    leftover = limit - sum(take.values())
    for tp in sorted(shares, key=lambda tp: take[tp] - shares[tp])[:leftover]:
        take[tp] += 1
    return {tp: origin[tp] + take[tp] for tp in target}
