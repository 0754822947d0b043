"""``format("headrace-stepped")``: headrace's source, with each trigger's end held at the
offsets a file names.

The harness keeps one query running per test and moves it on step by step: it produces a
step's events, hands their end offsets to the query (``write_cap``), and waits until the
query has processed them. A trigger can therefore never see part of a step (a producer's
batches land one by one), and the watermark moves exactly between steps, as with one
``availableNow`` run per step, without a query start per step. Partitions the file does
not name stay where the query is.

A query over several topics has one source per topic, and Spark asks each for its latest
offset in turn, in the same order at every trigger. Were each to read the step's file on
its own, a step handed over between two of those calls would be split across two
micro-batches (the first source's topics in one, the rest in the next: a table join then
emitted rows of a half-applied step). So a step is handed over as a pending file, and only
the query's first source (``leads``: the one whose call came first since the query
started) makes it current, at the start of its call, before any source of that trigger
reads it: every source of a trigger reads the same step.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.types import StructType

from headrace.spark import HeadraceDataSource, metadata
from headrace.spark.options import parse_source_options
from headrace.spark.reading import select_columns
from headrace.spark.source import StreamReader

CAP_OPTION = "steppedBy"


def _pending(cap: Path) -> Path:
    return cap.with_name(cap.name + ".next")


def _leader(cap: Path) -> Path:
    return cap.with_name(cap.name + ".leader")


def write_cap(path: Path, ends: dict[tuple[str, int], int]) -> None:
    """Let the query read up to ``ends`` (exclusive end offsets) from its next trigger on,
    in every source of that trigger at once."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(metadata.to_json(ends)))
    tmp.replace(_pending(path))


def new_run(path: Path) -> None:
    """Before a query (re)starts: its first source to be asked becomes the leader."""
    _leader(path).unlink(missing_ok=True)


def read_cap(path: Path) -> dict[tuple[str, int], int]:
    """The ends of the step the query's triggers now read (none before the first)."""
    try:
        return metadata.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return {}


class SteppedReader(StreamReader):
    def __init__(self, opts: Any, cap: Path) -> None:
        super().__init__(opts)
        self.cap = cap
        self.id = uuid.uuid4().hex

    def leads(self) -> bool:
        """Whether this source is the query's first to be asked at each trigger: the first
        of this run to ask claims ``<cap>.leader``."""
        marker = _leader(self.cap)
        with contextlib.suppress(FileExistsError):
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            with os.fdopen(fd, "w") as f:
                f.write(self.id)
        return marker.read_text() == self.id

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        if self.leads():
            with contextlib.suppress(FileNotFoundError):
                _pending(self.cap).replace(self.cap)
        latest = metadata.from_json(super().latestOffset(start, limit))
        begin = metadata.from_json(start)
        allowed = read_cap(self.cap)
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
