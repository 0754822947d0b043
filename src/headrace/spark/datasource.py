"""``HeadraceDataSource``: the Python data source Spark finds under ``format("headrace")``.

Spark instantiates it on the driver with the query's options; each method parses the
options it needs (raising ``OptionError`` at once for a wrong one) and returns the
reader or writer that does the work.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from headrace.spark.events import event_spec
from headrace.spark.options import parse_sink_options, parse_source_options
from headrace.spark.reading import schema_ddl, select_columns
from headrace.spark.sink import BatchWriter, StreamWriter
from headrace.spark.source import BatchReader, StreamReader


class HeadraceDataSource(DataSource):
    """Reads and writes Kafka-protocol topics with the options and columns of Spark's
    Kafka connector; see ``headrace.spark`` for the list."""

    @classmethod
    def name(cls) -> str:
        return "headrace"

    def schema(self) -> StructType | str:
        opts = {k.lower(): str(v) for k, v in self.options.items()}
        if "valueschema" in opts:
            return event_spec(opts["valueschema"], opts.get("eventtime", ""),
                              opts.get("deadlettertopic", "")).output_schema()
        return schema_ddl(opts.get("includeheaders", "false").lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(select_columns(parse_source_options(self.options, streaming=False),
                                          schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(select_columns(parse_source_options(self.options, streaming=True),
                                           schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(parse_sink_options(self.options), schema)
