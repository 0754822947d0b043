"""``select_columns``: which columns a read declared with a schema yields."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from headrace.spark.errors import OptionError
from headrace.spark.options import parse_source_options
from headrace.spark.reading import ARROW_SCHEMA, output_schema, select_columns
from tests.unit.spark.test_events_columnar import SCHEMA

BASE = {"kafka.bootstrap.servers": "localhost:1", "subscribe": "t"}


def schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])  # type: ignore[arg-type]


def test_the_sources_own_schema_reads_every_column() -> None:
    opts = parse_source_options(BASE, streaming=False)
    full = schema(("key", BinaryType()), ("value", BinaryType()), ("topic", StringType()),
                  ("partition", IntegerType()), ("offset", LongType()),
                  ("timestamp", TimestampType()), ("timestampType", IntegerType()))
    assert select_columns(opts, full).columns is None
    assert output_schema(select_columns(opts, full)) == ARROW_SCHEMA
    wrong = StructType([StructField(f.name, LongType()) for f in full.fields])
    with pytest.raises(OptionError, match="column 'key' is binary, not bigint"):
        select_columns(opts, wrong)


def test_a_subset_in_any_order() -> None:
    opts = select_columns(parse_source_options(BASE, streaming=False),
                          schema(("offset", LongType()), ("value", BinaryType())))
    assert opts.columns == ("offset", "value")
    assert output_schema(opts).names == ["offset", "value"]


def test_events_keep_their_own_columns() -> None:
    opts = parse_source_options({**BASE, "valueSchema": SCHEMA, "eventTime": "ts",
                                 "deadLetterTopic": "dlq"}, streaming=True)
    assert opts.events is not None
    assert select_columns(opts, opts.events.output_schema()) is opts
    with pytest.raises(OptionError, match="the columns are the events'"):
        select_columns(opts, schema(("value", BinaryType())))
