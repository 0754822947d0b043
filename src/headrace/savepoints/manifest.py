"""A savepoint's manifest: ``manifest.json`` at the root of the savepoint folder.

The folder::

    manifest.json
    operators/<operator id>/<state variable>.parquet/   (Spark's Parquet: part files)
    realtime-sink/<task>.ids                             (format 2: ``SinkReplay.ids``)

Each state variable's rows are the state data source's (``spark.read.format("statestore")``)
key columns flattened (for headrace's operators: the bucket, ``__headrace_bucket``) and
its value columns (``keys``: the bucket's pickled value, ``headrace.savepoints.state``).
Spark's own stream-stream join (``interval_join`` before transformWithState, schema
version 0) is written as rows instead: ``left``/``right``, each side's columns and
``matched`` (``headrace.savepoints.spark_join``).
``FORMAT_VERSION`` changes when this layout does; a reader refuses a newer one and reads
every older one (1: no ``realtime_sink``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from headrace.savepoints.errors import SavepointError

FORMAT_VERSION = 2
"""2: ``realtime_sink``, the real-time exactly-once sink's replay records."""
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class StateVariable:
    """One state variable's file (relative to the savepoint), rows (buckets), keys held
    and bytes on disk."""

    name: str
    file: str
    rows: int
    keys: int
    bytes: int


@dataclass(frozen=True)
class Operator:
    """A stateful operator of the query. ``name``/``schema_version``/``params`` come from
    its state's header (``name`` is ``""`` for an operator whose state is empty);
    ``key_schema`` is Spark's grouping key as JSON."""

    operator_id: int
    spark_operator: str
    name: str
    schema_version: int
    params: dict[str, Any]
    key_schema: dict[str, Any]
    partitions: int
    variables: tuple[StateVariable, ...]

    @property
    def keys(self) -> int:
        return sum(v.keys for v in self.variables)

    @property
    def bytes(self) -> int:
        return sum(v.bytes for v in self.variables)


@dataclass(frozen=True)
class SinkReplay:
    """The real-time exactly-once sink's replay records as of the savepoint's batch
    (``headrace.savepoints.replay``): what a query started from the savepoint must not write
    again. ``offsets``: per output topic and partition, where the output of the input after
    the savepoint's source offsets begins (a lower bound: the least of the output topics'
    end offsets that the tasks of epoch ``epoch`` recorded as they opened: the epoch after
    the savepoint's batch, or the batch's own when some task had not opened the next);
    ``ids``: per sink task, the file (relative to the savepoint, one id a line) of the ids
    that task committed for that input before ``offsets`` (what a crashed attempt wrote and
    the replay had not met yet), with ``id_count`` ids in all; ``tasks``: the sink's task
    count (the query's shuffle partitions)."""

    epoch: int
    tasks: int
    offsets: dict[str, dict[str, int]]
    ids: dict[str, str] = field(default_factory=dict)
    id_count: int = 0


@dataclass(frozen=True)
class Manifest:
    """Everything a savepoint holds besides its state files. ``sources``: per source of
    the query, in the checkpoint's order, its offsets as ``{topic: {partition: next
    offset}}``; ``watermark_ms``: the watermark the batch after ``batch_id`` runs with;
    ``sink``: the exactly-once sink's markers (transactional id -> next batch) of query
    ``query_id``, when read (empty otherwise); ``realtime_sink``: the real-time path's
    exactly-once sink's replay records (None: the query had no such sink, or format 1)."""

    format_version: int
    created_at: str
    checkpoint: str
    query_id: str
    batch_id: int
    shuffle_partitions: int
    watermark_ms: int
    sources: tuple[dict[str, dict[str, int]] | None, ...]
    operators: tuple[Operator, ...]
    sink: dict[str, int] = field(default_factory=dict)
    headrace_version: str = ""
    spark_version: str = ""
    realtime_sink: SinkReplay | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Manifest:
        raw = json.loads(text)
        version = raw.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise SavepointError(f"savepoint format version {version!r} is not one this "
                                 f"headrace reads (up to {FORMAT_VERSION})")
        operators = tuple(
            Operator(**{**o, "variables": tuple(StateVariable(**v) for v in o["variables"])})
            for o in raw.pop("operators"))
        replay = raw.pop("realtime_sink", None)
        return Manifest(**{**raw, "operators": operators,
                           "sources": tuple(raw.get("sources", ())),
                           "realtime_sink": None if replay is None else SinkReplay(**replay)})


def read_manifest(folder: str | Path) -> Manifest:
    """The manifest of the savepoint at ``folder``; ``SavepointError`` if there is none."""
    path = Path(folder) / MANIFEST
    try:
        text = path.read_text()
    except OSError as e:
        raise SavepointError(f"{folder} is not a savepoint (no readable {MANIFEST})") from e
    try:
        return Manifest.from_json(text)
    except (ValueError, KeyError, TypeError) as e:
        raise SavepointError(f"{path} is not a valid savepoint manifest: {e}") from e
