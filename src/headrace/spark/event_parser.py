"""Parsing of ``read_events``' records, in the read task: ``EventParser`` turns raw
source batches into typed rows and dead letters (``headrace.spark.events`` has the
options and the driver's side).

Apart from the rest of the connector because it needs pyarrow's compute and JSON reader:
only the Python worker that runs a read task imports it, not the ones that create the
data source, plan a read or commit a write.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from headrace.spark.errors import Invalid, OptionError
from headrace.spark.events import EventSpec
from headrace.spark.registry_values import RegistryValueDecoder

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _timestamp(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):  # Avro's timestamp logical types, Protobuf Timestamp
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, bool):
        raise Invalid("expected a timestamp, got a boolean")
    if isinstance(value, (int, float)):
        try:  # exact for integers (value / 1000 as a float is not, past year 2200 or so)
            return _EPOCH + dt.timedelta(milliseconds=value)
        except (OverflowError, ValueError):
            raise Invalid(f"epoch milliseconds {value} out of range") from None
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise Invalid(f"not an ISO-8601 timestamp: {value!r}") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    raise Invalid(f"expected a timestamp, got {type(value).__name__}")


def _int_check(lo: int, hi: int) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"expected an integer, got {type(value).__name__}")
        if not lo <= value <= hi:
            raise Invalid(f"integer {value} out of range")
        return value
    return check


def _unicode(text: str) -> str:
    """``text`` if it can be UTF-8 (JSON's "\\ud83d" escapes decode to lone surrogates)."""
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            raise Invalid(f"a string with a lone surrogate: {text!r}") from None
    return text


def _converter(kind: DataType) -> Callable[[Any], Any]:
    """A function that checks a JSON value against ``kind`` and returns it in Arrow's terms."""
    if isinstance(kind, StringType):
        def string(value: Any) -> Any:
            if not isinstance(value, str):
                raise Invalid(f"expected a string, got {type(value).__name__}")
            return _unicode(value)
        return string
    if isinstance(kind, (ByteType, ShortType, IntegerType, LongType)):
        bits = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}[type(kind)]
        return _int_check(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if isinstance(kind, (DoubleType, FloatType)):
        def number(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise Invalid(f"expected a number, got {type(value).__name__}")
            return float(value)
        return number
    if isinstance(kind, BooleanType):
        def boolean(value: Any) -> Any:
            if not isinstance(value, bool):
                raise Invalid(f"expected a boolean, got {type(value).__name__}")
            return value
        return boolean
    if isinstance(kind, TimestampType):
        return _timestamp
    if isinstance(kind, DateType):
        def date(value: Any) -> Any:
            try:
                return dt.date.fromisoformat(value)
            except (TypeError, ValueError):
                raise Invalid(f"not an ISO-8601 date: {value!r}") from None
        return date
    if isinstance(kind, DecimalType):
        def decimal(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
                raise Invalid(f"expected a decimal, got {type(value).__name__}")
            try:
                return Decimal(str(value)).quantize(Decimal(1).scaleb(-kind.scale))
            except InvalidOperation:
                raise Invalid(f"not a decimal: {value!r}") from None
        return decimal
    if isinstance(kind, ArrayType):
        element = _nullable(_converter(kind.elementType), kind.containsNull)

        def array(value: Any) -> Any:
            if not isinstance(value, list):
                raise Invalid(f"expected an array, got {type(value).__name__}")
            return [element(v) for v in value]
        return array
    if isinstance(kind, MapType):
        mapped = _nullable(_converter(kind.valueType), kind.valueContainsNull)

        def mapping(value: Any) -> Any:
            if not isinstance(value, dict):
                raise Invalid(f"expected an object, got {type(value).__name__}")
            return [(_unicode(k), mapped(v)) for k, v in value.items()]
        return mapping
    if isinstance(kind, StructType):
        return _struct(kind)
    raise OptionError(f"valueSchema type {kind.simpleString()} is not supported")


def _nullable(convert: Callable[[Any], Any], nullable: bool) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None:
            if not nullable:
                raise Invalid("null where a value is required")
            return None
        return convert(value)
    return check


def _struct(kind: StructType) -> Callable[[Any], Any]:
    fields = [(f.name, _nullable(_converter(f.dataType), f.nullable)) for f in kind.fields]

    def struct(value: Any) -> Any:
        if not isinstance(value, dict):
            raise Invalid(f"expected a JSON object, got {type(value).__name__}")
        out = {}
        for name, convert in fields:
            try:
                out[name] = convert(value.get(name))
            except Invalid as e:
                raise Invalid(f"field {name!r}: {e}") from None
        return out
    return struct


# Types the columnar JSON path reads (Arrow's JSON parser with an explicit schema refuses
# exactly the values ``_converter`` refuses for them); any other schema parses row by row.
_COLUMNAR_TYPES = {StringType: pa.string(), LongType: pa.int64(), IntegerType: pa.int64(),
                   ShortType: pa.int64(), ByteType: pa.int64(), DoubleType: pa.float64(),
                   BooleanType: pa.bool_()}
# Epoch milliseconds that ``_timestamp`` (the row path) takes: years 1 to 9999.
_MS_RANGE = (-62135596800000, 253402300799999)
_KAFKA_FIELDS = (("key", "kafka_key"), ("topic", "kafka_topic"), ("partition", "kafka_partition"),
                 ("offset", "kafka_offset"), ("timestamp", "kafka_timestamp"))


class EventParser:
    """Turns raw source batches into typed batches plus dead letters. Built in the task.

    Plain JSON values under a flat schema of strings, integers, doubles and booleans with
    an integer (epoch ms) event time are parsed a whole batch at a time by Arrow's JSON
    reader; a batch it cannot take as is (any bad record, a null where the schema forbids
    one, a value Arrow's reader would frame differently) is parsed again row by row, which
    is what decides the good rows and the dead letters. Both paths give the same rows.
    """

    def __init__(self, spec: EventSpec) -> None:
        self.spec = spec
        schema = spec.schema
        self.names = schema.fieldNames()
        self.parse_row = _struct(schema)
        self.out_schema = to_arrow_schema(spec.output_schema(), timezone="UTC")
        self.event_time_field = spec.event_time
        self.decode: Callable[[bytes], Any] = _json_document
        if spec.schema_registry_url:
            self.decode = RegistryValueDecoder(spec.schema_registry_url).decode
        self.columnar: pa.Schema | None = None
        self.required: list[str] = []
        if (not spec.schema_registry_url and not spec.envelope
                and all(type(f.dataType) in _COLUMNAR_TYPES for f in schema.fields)
                and isinstance(schema[spec.event_time].dataType, (LongType, IntegerType))):
            self.columnar = pa.schema([(f.name, _COLUMNAR_TYPES[type(f.dataType)])
                                       for f in schema.fields])
            self.required = [f.name for f in schema.fields
                             if not f.nullable or f.name == spec.event_time]

    def parse(self, raw: pa.RecordBatch
              ) -> tuple[pa.RecordBatch, list[tuple[bytes | None, bytes | None, list[Any]]]]:
        """Good rows as one Arrow batch; bad ones as (key, value, headers) dead letters."""
        if self.columnar is not None and raw.num_rows:
            batch = self._parse_columnar(raw, self.columnar)
            if batch is not None:
                return batch, []
        return self._parse_rows(raw)

    def _parse_columnar(self, raw: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch | None:
        """Every record of ``raw`` parsed at once, or None if any record needs a closer look."""
        values = raw.column("value")
        if values.null_count:
            return None
        try:
            text = values.cast(pa.string())  # checks UTF-8
        except pa.ArrowException:
            return None
        # One line per record, each exactly one document: no line breaks inside a value, no
        # value that is only whitespace (Arrow skips blank lines), the same number of rows.
        if (pc.any(pc.match_substring_regex(text, "[\r\n]")).as_py()
                or pc.min(pc.utf8_length(pc.utf8_trim_whitespace(text))).as_py() == 0
                or pc.any(pc.starts_with(text, "\ufeff")).as_py()):
            return None
        lines = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(text)], pa.int32()),
                                                        text), "\n")[0].as_buffer()
        try:
            table = pa_json.read_json(
                pa.BufferReader(lines),
                read_options=pa_json.ReadOptions(use_threads=False, block_size=lines.size + 1),
                parse_options=pa_json.ParseOptions(explicit_schema=schema,
                                                   unexpected_field_behavior="ignore",
                                                   newlines_in_values=False))
        except pa.ArrowException:
            return None
        if table.num_rows != raw.num_rows or any(table.column(n).null_count
                                                 for n in self.required):
            return None
        ms = table.column(self.event_time_field)
        if (pc.min(ms).as_py() < _MS_RANGE[0]) or (pc.max(ms).as_py() > _MS_RANGE[1]):
            return None
        columns: dict[str, Any] = {name: table.column(name) for name in self.names}
        columns["event_time"] = pc.multiply(ms, 1000).cast(pa.timestamp("us", tz="UTC"))
        for src, dst in _KAFKA_FIELDS:
            columns[dst] = raw.column(src)
        try:
            arrays = [_array(columns[f.name]).cast(f.type) for f in self.out_schema]
        except pa.ArrowException:  # an integer out of a narrower type's range
            return None
        return pa.RecordBatch.from_arrays(arrays, schema=self.out_schema)

    def _parse_rows(self, raw: pa.RecordBatch
                    ) -> tuple[pa.RecordBatch, list[tuple[bytes | None, bytes | None, list[Any]]]]:
        cols = raw.to_pydict()
        rows: list[dict[str, Any]] = []
        keep: list[int] = []
        dead: list[tuple[bytes | None, bytes | None, list[Any]]] = []
        debezium = self.spec.envelope == "debezium"
        for i, value in enumerate(cols["value"]):
            try:
                if value is None:
                    if debezium:
                        continue  # a tombstone after a delete
                    raise Invalid("the record has no value")
                doc = self.decode(value)
                if debezium:
                    if not isinstance(doc, dict) or "after" not in doc:
                        raise Invalid("not a change event (no 'after')")
                    doc = doc["after"]
                    if doc is None:
                        continue  # a delete
                row = self.parse_row(doc)
                if row[self.event_time_field] is None:
                    raise Invalid(f"no event time in field {self.event_time_field!r}")
                row["event_time"] = _timestamp(row[self.event_time_field])
            except Invalid as e:
                dead.append((cols["key"][i], value, [
                    ("headrace.error", str(e).encode()),
                    ("headrace.source.topic", cols["topic"][i].encode()),
                    ("headrace.source.partition", str(cols["partition"][i]).encode()),
                    ("headrace.source.offset", str(cols["offset"][i]).encode()),
                    ("headrace.source.timestamp",
                     str(int(cols["timestamp"][i].timestamp() * 1000)).encode()),
                ]))
                continue
            rows.append(row)
            keep.append(i)
        data: dict[str, list[Any]] = {name: [r[name] for r in rows] for name in self.names}
        data["event_time"] = [r["event_time"] for r in rows]
        for src, dst in _KAFKA_FIELDS:
            column = cols[src]
            data[dst] = [column[i] for i in keep]
        batch = pa.RecordBatch.from_pydict(
            {f.name: data[f.name] for f in self.out_schema}, schema=self.out_schema)
        return batch, dead


def _array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _json_document(value: bytes) -> Any:
    try:
        return json.loads(value)
    except ValueError as e:
        raise Invalid(f"not JSON: {e}") from None


def dead_letter_batches(dead: list[tuple[bytes | None, bytes | None, list[Any]]]
                        ) -> Iterator[pa.RecordBatch]:
    """Dead letters in the sink's input shape (key, value, headers)."""
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    yield pa.RecordBatch.from_arrays(
        [pa.array([d[0] for d in dead], pa.binary()),
         pa.array([d[1] for d in dead], pa.binary()),
         pa.array([[{"key": k, "value": v} for k, v in d[2]] for d in dead], header_type)],
        names=["key", "value", "headers"])
