"""Typed events from JSON values, with a dead-letter topic for what does not fit.

``read_events(spark, topic, schema, event_time=..., dead_letter_topic=...)`` is a stream
of the schema's columns plus ``event_time`` and the record's coordinates (``kafka_key``,
``kafka_topic``, ``kafka_partition``, ``kafka_offset``, ``kafka_timestamp``). Parsing runs
in the read task. A record that is not JSON, not an object, lacks a non-nullable field,
has a value of the wrong type or no usable event time is produced to the dead-letter
topic with its original key and bytes and headers ``headrace.error``,
``headrace.source.topic``, ``headrace.source.partition``, ``headrace.source.offset`` and
``headrace.source.timestamp``; it neither fails the query nor vanishes.

The dead-letter writes use the sink's exactly-once protocol keyed by (query, read task,
micro-batch), so a re-run read task does not write its dead letters twice. They are
written only when a task meets a bad record. The parsing itself is in
``headrace.spark.event_parser`` (pyarrow): this module is the options and the driver's
side, light enough for every Python worker that only creates the data source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pyspark.errors import PySparkRuntimeError
from pyspark.sql.types import (
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from headrace.spark.errors import OptionError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _ddl(text: str) -> StructType:
    """Parse a DDL schema. Driver only: Spark parses DDL in the JVM."""
    parsed = StructType.fromDDL(text)
    if not isinstance(parsed, StructType):
        raise OptionError(f"not a struct schema: {text!r}")
    return parsed


# Built without DDL parsing, which needs a JVM that read tasks do not have.
KAFKA_COLUMNS = StructType([
    StructField("event_time", TimestampType()), StructField("kafka_key", BinaryType()),
    StructField("kafka_topic", StringType()), StructField("kafka_partition", IntegerType()),
    StructField("kafka_offset", LongType()), StructField("kafka_timestamp", TimestampType())])


@dataclass(frozen=True)
class EventSpec:
    """How to turn a record value into a typed row (option ``valueSchema``,
    ``eventTime``, ``deadLetterTopic`` of the source)."""

    schema_json: str
    event_time: str
    dead_letter_topic: str
    schema_registry_url: str = ""
    """Set: values are in a schema registry's wire format (Avro, JSON Schema or Protobuf),
    decoded with the writer's schema from this registry; else values are JSON."""
    envelope: str = ""
    """``debezium``: values are change events; rows are their ``after`` state, and
    deletes and tombstones are skipped (the latest state of a key stays as it was)."""

    @property
    def schema(self) -> StructType:
        parsed = StructType.fromJson(json.loads(self.schema_json))
        assert isinstance(parsed, StructType)
        return parsed

    def output_schema(self) -> StructType:
        """The schema's fields, then ``event_time`` (a timestamp; a field of that name,
        say epoch milliseconds, becomes it in place) and the ``kafka_*`` columns."""
        fields = [StructField("event_time", TimestampType(), f.nullable)
                  if f.name == "event_time" else f for f in self.schema.fields]
        out = StructType(fields)
        for f in KAFKA_COLUMNS.fields:
            if f.name == "event_time" and f.name in self.schema.fieldNames():
                continue
            out = out.add(f)
        return out


def event_spec(schema_text: str, event_time: str, dead_letter_topic: str,
               schema_registry_url: str = "", envelope: str = "") -> EventSpec:
    """Validate the options on the driver. ``schema_text`` is DDL or StructType JSON."""
    try:
        schema = (StructType.fromJson(json.loads(schema_text)) if schema_text.lstrip()
                  .startswith("{") else _ddl(schema_text))
    except OptionError:
        raise
    except PySparkRuntimeError as e:
        # Data source options are read in a Python worker, which has no JVM to parse DDL.
        raise OptionError("option 'valueSchema' must be a StructType's JSON (schema.json()); "
                          "read_events also takes DDL") from e
    except Exception as e:  # Spark raises several error types for a bad DDL string
        raise OptionError(f"option 'valueSchema' is not a schema: {e}") from e
    if event_time not in schema.fieldNames():
        raise OptionError(f"eventTime field {event_time!r} is not in the schema "
                          f"({', '.join(schema.fieldNames())})")
    kind = schema[event_time].dataType
    if not isinstance(kind, (TimestampType, LongType, IntegerType, DoubleType, StringType)):
        raise OptionError(f"eventTime field {event_time!r} must be a timestamp, epoch "
                          f"milliseconds or an ISO-8601 string, not {kind.simpleString()}")
    if "event_time" in schema.fieldNames() and event_time != "event_time":
        raise OptionError("a field named event_time must be the eventTime field: the "
                          "output's event_time column is the parsed event time")
    clash = set(schema.fieldNames()) & {f.name for f in KAFKA_COLUMNS.fields} - {"event_time"}
    if clash:
        raise OptionError(f"schema fields {sorted(clash)} clash with the columns read_events "
                          "adds")
    if not dead_letter_topic:
        raise OptionError("a dead-letter topic is required: bad records must go somewhere")
    if schema_registry_url and not schema_registry_url.startswith(("http://", "https://")):
        raise OptionError(f"option 'schemaRegistryUrl' must be an http(s) URL, not "
                          f"{schema_registry_url!r}")
    if envelope not in ("", "debezium"):
        raise OptionError(f"option 'valueEnvelope' must be debezium (or absent), not "
                          f"{envelope!r}")
    return EventSpec(schema.json(), event_time, dead_letter_topic, schema_registry_url,
                     envelope)


class OffsetsOrigin(Protocol):
    """Where a stream starts instead of ``startingOffsets``: a savepoint
    (``headrace.savepoints.Savepoint``)."""

    def starting_offsets(self, topic: str) -> str:
        """``startingOffsets`` JSON for ``topic``."""
        ...


def read_events(spark: SparkSession, topic: str, schema: StructType | str, *,
                event_time: str, dead_letter_topic: str, streaming: bool = True,
                schema_registry_url: str = "", envelope: str = "",
                options: Mapping[str, str] | None = None, source: str = "headrace",
                from_savepoint: OffsetsOrigin | None = None, **more: str) -> DataFrame:
    """A (streaming, by default) DataFrame of typed events from JSON values of ``topic``,
    or, with ``schema_registry_url``, from values in the registry's wire format (Avro, JSON
    Schema, Protobuf; each decoded with its writer's schema and projected onto ``schema``;
    unknown ids and undecodable payloads are dead letters). ``envelope="debezium"`` reads
    change events (``headrace cdc``, Debezium): each row is an event's ``after``.

    ``options`` (and keyword arguments) are the source's; ``kafka_bootstrap_servers=...``
    may be spelled with underscores for ``kafka.bootstrap.servers``, as any ``kafka.*``.
    ``source`` names the registered data source that reads: ``headrace`` or a subclass of
    ``HeadraceDataSource`` registered under its own name. ``from_savepoint``: start where
    a savepoint's query would have read next (it replaces ``startingOffsets``; the query
    needs a fresh checkpoint). Requires
    ``headrace.spark.register(spark)`` first.
    """
    # DDL is parsed here, on the driver: the data source's own process has no JVM.
    text = (schema if isinstance(schema, StructType) else _ddl(schema)).json()
    event_spec(text, event_time, dead_letter_topic, schema_registry_url, envelope)  # fail here
    reader = spark.readStream if streaming else spark.read
    fmt = reader.format(source).option("subscribe", topic).option("valueSchema", text) \
        .option("eventTime", event_time).option("deadLetterTopic", dead_letter_topic)
    if schema_registry_url:
        fmt = fmt.option("schemaRegistryUrl", schema_registry_url)
    if envelope:
        fmt = fmt.option("valueEnvelope", envelope)
    settings = {**(options or {}), **more}
    if from_savepoint is not None:
        settings["startingOffsets"] = from_savepoint.starting_offsets(topic)
    for name, value in settings.items():
        key = name.replace("_", ".") if name.startswith("kafka_") else name
        fmt = fmt.option(key, value)
    return fmt.load()
