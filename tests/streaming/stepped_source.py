"""``format("headrace-stepped")``: headrace's source, with each trigger's end held at the
offsets a file names.

The harness keeps one query running per test and moves it on step by step: it produces a
step's events, writes their end offsets to the file, and waits for the query to process
all available data. A trigger can therefore never see part of a step (a producer's
batches land one by one; two topics are read by two sources), and the watermark moves
exactly between steps, as with one ``availableNow`` run per step, without a query start
per step. Partitions the file does not name stay where the query is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.types import StructType

from headrace.spark import HeadraceDataSource, metadata
from headrace.spark.options import parse_source_options
from headrace.spark.reading import select_columns
from headrace.spark.source import StreamReader

CAP_OPTION = "steppedBy"


def write_cap(path: Path, ends: dict[tuple[str, int], int]) -> None:
    """Let the query read up to ``ends`` (exclusive end offsets), atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(metadata.to_json(ends)))
    tmp.replace(path)


class SteppedReader(StreamReader):
    def __init__(self, opts: Any, cap: Path) -> None:
        super().__init__(opts)
        self.cap = cap

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        latest = metadata.from_json(super().latestOffset(start, limit))
        begin = metadata.from_json(start)
        allowed = metadata.from_json(json.loads(self.cap.read_text()))
        return metadata.to_json({
            tp: max(min(o, allowed.get(tp, begin.get(tp, 0))), begin.get(tp, 0))
            for tp, o in latest.items()})


class SteppedSource(HeadraceDataSource):
    @classmethod
    def name(cls) -> str:
        return "headrace-stepped"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = {k: v for k, v in self.options.items() if k.lower() != CAP_OPTION.lower()}
        opts = select_columns(parse_source_options(options, streaming=True), schema)
        return SteppedReader(opts, Path(self.options[CAP_OPTION]))
