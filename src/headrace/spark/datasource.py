"""``HeadraceDataSource``: the Python data source Spark finds under ``format("headrace")``.

Spark instantiates it on the driver with the query's options; each method parses the
options it needs (raising ``OptionError`` at once for a wrong one) and returns the
reader or writer that does the work.

Each method imports the modules it needs when it is called: Spark creates the data source
in one Python worker, plans its reads in another, creates its writer in a third, and each
imports only its own part of the connector (see ``headrace.spark.daemon``).
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

from headrace.spark.options import parse_sink_options, parse_source_options, schema_ddl


class HeadraceDataSource(DataSource):
    """Reads and writes Kafka-protocol topics with the options and columns of Spark's
    Kafka connector; see ``headrace.spark`` for the list."""

    @classmethod
    def name(cls) -> str:
        return "headrace"

    def schema(self) -> StructType | str:
        opts = {k.lower(): str(v) for k, v in self.options.items()}
        if "valueschema" in opts:
            from headrace.spark.events import event_spec

            return event_spec(opts["valueschema"], opts.get("eventtime", ""),
                              opts.get("deadlettertopic", "")).output_schema()
        return schema_ddl(opts.get("includeheaders", "false").lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        from headrace.spark.reading import select_columns
        from headrace.spark.source import BatchReader

        return BatchReader(select_columns(parse_source_options(self.options, streaming=False),
                                          schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from headrace.spark.reading import select_columns
        from headrace.spark.source import StreamReader

        return StreamReader(select_columns(parse_source_options(self.options, streaming=True),
                                           schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from headrace.spark.sink import BatchWriter

        return BatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from headrace.spark.sink import StreamWriter

        return StreamWriter(parse_sink_options(self.options), schema)
