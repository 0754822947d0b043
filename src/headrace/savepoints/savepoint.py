"""Reading a savepoint, and what a query needs to start from one.

``Savepoint(path)`` reads the manifest; ``starting_offsets(topic)`` is a source's
``startingOffsets``; ``resume(...)`` is what an operator of the new query takes: its state
as transformWithState's initial state, and the savepoint's watermark and migrations
(``state.Resume``), after checking that its state can carry over (else
``IncompatibleStateError``, before anything runs).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, GroupedData, SparkSession

from headrace.savepoints import migrations
from headrace.savepoints.errors import IncompatibleStateError, SavepointError
from headrace.savepoints.manifest import Manifest, Operator, read_manifest
from headrace.savepoints.markers import sink_markers
from headrace.savepoints.state import Resume


class Savepoint:
    """A savepoint folder, read. ``operator_id``: pin the operator ``resume`` takes (for a
    query with several operators of the same kind); see ``pinned``."""

    def __init__(self, path: str | Path, operator_id: int | None = None) -> None:
        self.path = Path(path)
        self.manifest: Manifest = read_manifest(self.path)
        self.operator_id = operator_id

    @staticmethod
    def of(source: Savepoint | str | Path) -> Savepoint:
        return source if isinstance(source, Savepoint) else Savepoint(source)

    def pinned(self, operator_id: int) -> Savepoint:
        """This savepoint, with ``resume`` taking operator ``operator_id``."""
        self.operator(operator_id)
        return Savepoint(self.path, operator_id)

    def operator(self, operator_id: int) -> Operator:
        for op in self.manifest.operators:
            if op.operator_id == operator_id:
                return op
        raise SavepointError(f"savepoint {self.path} has no operator {operator_id} "
                             f"(it has {[o.operator_id for o in self.manifest.operators]})")

    def offsets(self) -> dict[str, dict[str, int]]:
        """Every source's next offsets, by topic and partition."""
        merged: dict[str, dict[str, int]] = {}
        for source in self.manifest.sources:
            for topic, parts in (source or {}).items():
                merged.setdefault(topic, {}).update(parts)
        return merged

    def starting_offsets(self, topic: str) -> str:
        """``startingOffsets`` (JSON) for a source of ``topic``: where the savepoint's query
        would have read next. Raises ``IncompatibleStateError`` for a topic it never read."""
        offsets = self.offsets()
        if topic not in offsets:
            raise IncompatibleStateError(
                f"the savepoint has no offsets for topic {topic!r} (it read "
                f"{', '.join(sorted(offsets)) or 'no topic'})")
        return json.dumps({topic: offsets[topic]})

    def state(self, spark: SparkSession, operator_id: int,
              variable: str | None = None) -> DataFrame:
        """An operator's state variable (its only one by default) as a DataFrame: the
        grouping key's columns and the value's (``keys``: a bucket's pickled value)."""
        op = self.operator(operator_id)
        chosen = [v for v in op.variables if variable in (None, v.name)]
        if len(chosen) != 1:
            raise SavepointError(f"operator {operator_id} has state variables "
                                 f"{[v.name for v in op.variables]}; name one")
        return spark.read.parquet(str(self.path / chosen[0].file))

    def verify_sink(self, bootstrap_servers: str,
                    client_configs: dict[str, str] | None = None) -> None:
        """Raise ``IncompatibleStateError`` if the savepoint's query wrote output through
        the exactly-once sink after the savepoint's batch: a query started from it would
        write that output again. Nothing to check when the savepoint recorded no markers."""
        if not self.manifest.sink:
            return
        now = sink_markers(bootstrap_servers, self.manifest.query_id, client_configs)
        ahead = sorted(g for g, n in now.items() if n > self.manifest.sink.get(g, -1))
        if ahead:
            raise IncompatibleStateError(
                f"query {self.manifest.query_id} committed output after batch "
                f"{self.manifest.batch_id} of this savepoint ({', '.join(ahead)}): starting "
                "from it would repeat that output; stop the query, then take the savepoint")

    def resume(self, spark: SparkSession, *, operator: str, family: Sequence[str],
               version: int, params: dict[str, Any], fixed: dict[str, str],
               key_column: str) -> tuple[GroupedData | None, Resume]:
        """The initial state (grouped by ``key_column``, None when the operator held
        nothing) and ``Resume`` of an operator named ``operator`` (schema ``version``)
        with ``params``. ``family``: the names the same operator may have had (windowed's
        two processors); ``fixed``: the params that must not change, each with why.
        Raises ``IncompatibleStateError`` naming the operator and the reason."""
        op, resume = self.check(operator=operator, family=family, version=version,
                                params=params, fixed=fixed)
        if not op.keys or not op.variables:
            return None, resume
        initial = self.state(spark, op.operator_id)
        if key_column not in initial.columns:
            raise IncompatibleStateError(
                f"operator {op.operator_id} ({operator}): its state is keyed by "
                f"{initial.columns[:-1]}, not {key_column}")
        return initial.groupBy(key_column), resume

    def check(self, *, operator: str, family: Sequence[str], version: int,
              params: dict[str, Any], fixed: dict[str, str]) -> tuple[Operator, Resume]:
        """The savepoint's operator that a new operator named ``operator`` (schema
        ``version``, ``params``) takes its state from, and its ``Resume``, after checking
        that the state can carry over (``resume``'s arguments). Raises
        ``IncompatibleStateError`` naming the operator and the reason. Reads no state."""
        op = self._match(operator, family)
        if op.name and op.name != operator:
            raise IncompatibleStateError(
                f"operator {op.operator_id} ({op.name}): its state cannot become "
                f"{operator}'s (the aggregates decide which processor keeps a window's "
                "state; they changed)")
        old = op.params
        for name, why in fixed.items():
            if op.name and old.get(name) != params.get(name):
                raise IncompatibleStateError(
                    f"operator {op.operator_id} ({operator}): {name} changed from "
                    f"{old.get(name)!r} to {params.get(name)!r}; {why}")
        steps = migrations.chain(operator, op.schema_version, version)
        resume = Resume(self.manifest.watermark_ms, steps)
        return op, resume

    def find(self, operator: str, family: Sequence[str]) -> Operator:
        """The savepoint's operator that a new operator named ``operator`` would take its
        state from (``check`` without the checks: its schema version decides how)."""
        return self._match(operator, family)

    def _match(self, operator: str, family: Sequence[str]) -> Operator:
        if self.operator_id is not None:
            return self.operator(self.operator_id)
        names = set(family) | {operator}
        found = [o for o in self.manifest.operators if o.name in names]
        if not found:  # state written before headers, or empty: by position
            found = [o for o in self.manifest.operators if not o.name]
        if len(found) != 1:
            raise IncompatibleStateError(
                f"the savepoint holds {len(found)} operators that could be {operator} "
                f"({[o.operator_id for o in found]}); pass from_savepoint=Savepoint(path)"
                ".pinned(operator id)")
        return found[0]
