"""A savepoint's manifest: ``manifest.json`` at the root of the savepoint folder.

The folder::

    manifest.json
    operators/<operator id>/<state variable>.parquet/   (Spark's Parquet: part files)

Each state variable's rows are the state data source's (``spark.read.format("statestore")``)
key columns flattened (for headrace's operators: the bucket, ``__headrace_bucket``) and
its value columns (``keys``: the bucket's pickled value, ``headrace.savepoints.state``).
Spark's own stream-stream join (``interval_join`` before transformWithState, schema
version 0) is written as rows instead: ``left``/``right``, each side's columns and
``matched`` (``headrace.savepoints.spark_join``).
``FORMAT_VERSION`` changes when this layout does; a reader refuses a newer one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from headrace.savepoints.errors import SavepointError

FORMAT_VERSION = 1
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
class Manifest:
    """Everything a savepoint holds besides its state files. ``sources``: per source of
    the query, in the checkpoint's order, its offsets as ``{topic: {partition: next
    offset}}``; ``watermark_ms``: the watermark the batch after ``batch_id`` runs with;
    ``sink``: the exactly-once sink's markers (transactional id -> next batch) of query
    ``query_id``, when read (empty otherwise)."""

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
        return Manifest(**{**raw, "operators": operators,
                           "sources": tuple(raw.get("sources", ()))})


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
