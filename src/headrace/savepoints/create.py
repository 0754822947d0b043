"""Writing a savepoint: a committed batch's operator state, offsets, watermark and sink
markers, into a folder that appears whole or not at all.

Everything is written into a hidden sibling folder (``.<name>.partial-<random>``) and
renamed to the savepoint's name once the manifest is on disk: a rename within one
directory is atomic, so a writer killed at any point (kill -9 included) leaves the
savepoint complete or absent, never half-written; at worst a partial folder, which no
reader takes for a savepoint (it has no manifest under the savepoint's name).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pyspark
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

import headrace
from headrace.savepoints import spark_join
from headrace.savepoints.checkpoint import CommittedBatch, committed_batch
from headrace.savepoints.errors import SavepointError
from headrace.savepoints.manifest import (
    FORMAT_VERSION,
    MANIFEST,
    Manifest,
    Operator,
    SinkReplay,
    StateVariable,
)
from headrace.savepoints.markers import sink_markers
from headrace.savepoints.replay import read_replay, write_ids
from headrace.savepoints.state import LEGACY_VERSION, count_keys, decode, jvm_header

# Spark's physical operators that are transformWithState (Scala, Python, pandas flavours).
_TWS = ("transformWithStateExec", "transformWithStateInPandasExec",
        "transformWithStateInPySparkExec")


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _describe(file: Path) -> tuple[int, int, dict[str, Any] | None]:
    """Rows, keys and the header of a state variable's Parquet (values pickled by
    headrace's Python operators; the real-time rule operator's one value per key, its
    header in the value; another value counts one key per row, no header)."""
    table = pq.read_table(file)
    if JVM_STATE in table.column_names:
        first = next((v for v in table.column(JVM_STATE).to_pylist() if v), None)
        return table.num_rows, table.num_rows, jvm_header(first)
    if "keys" not in table.column_names:
        return table.num_rows, table.num_rows, None
    keys = 0
    head: dict[str, Any] | None = None
    for value in table.column("keys").to_pylist():
        if value is None:
            continue
        held, _, found = decode(value)
        head = head or found
        keys += count_keys((found or {}).get("operator", ""), held)
    return table.num_rows, keys, head


JVM_KEY, JVM_STATE = "key", "__state"
"""The columns a JVM operator's value state (Java transformWithState, one binary value per
string key: the real-time rule operator) is written with: its key, its stored value."""


@contextlib.contextmanager
def _checkpoint_format(spark: SparkSession, version: int) -> Iterator[None]:
    """While open, the session reads state stores of checkpoint format ``version``: Spark's
    state reader takes it from the session, not from the checkpoint, and Real-Time Mode
    writes version 2 (state files named by a unique id per batch, kept in ``commits/n``)."""
    name = "spark.sql.streaming.stateStore.checkpointFormatVersion"
    before = spark.conf.get(name, None)
    spark.conf.set(name, str(version))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(name)
        else:
            spark.conf.set(name, before)


def create(spark: SparkSession, checkpoint: str | Path, output: str | Path, *,
           batch_id: int | None = None, bootstrap_servers: str | None = None,
           client_configs: dict[str, str] | None = None) -> Manifest:
    """Write a savepoint of the query whose checkpoint is ``checkpoint`` into ``output``
    (which must not exist), as of its last committed batch (or ``batch_id``). The query
    may be running: what is read is the committed batch, which nothing changes any more.
    With ``bootstrap_servers`` the exactly-once sink's markers are recorded too. The
    real-time path's exactly-once sink's replay records are copied (``replay``), read from
    the checkpoint first, while they still describe that batch.

    Blocks while Spark reads the state (one job per state variable). Raises
    ``SavepointError`` for a checkpoint without a committed batch, an existing output,
    or an operator whose state a savepoint cannot carry (Spark's own aggregations: their
    state is not transformWithState's, so no query could start from it; every headrace
    operator is transformWithState). Spark's own stream-stream join is the exception:
    ``interval_join`` was that join before schema version 1, and its state is written
    for today's ``interval_join`` to start from (``spark_join``).
    """
    out = Path(output)
    if out.exists():
        raise SavepointError(f"{out} exists; a savepoint is written to a new folder")
    batch = committed_batch(checkpoint, batch_id)
    replay = read_replay(batch.path, batch.batch_id)
    with _checkpoint_format(spark, batch.checkpoint_format):
        return _create(spark, batch, out, bootstrap_servers, client_configs, replay)


def _create(spark: SparkSession, batch: CommittedBatch, out: Path,
            bootstrap_servers: str | None, client_configs: dict[str, str] | None,
            replay: tuple[SinkReplay, dict[int, list[str]]] | None) -> Manifest:
    try:
        meta = spark.read.format("state-metadata").option("batchId", batch.batch_id) \
            .load(str(batch.path)).collect()
    except PySparkException as e:
        raise SavepointError(f"Spark cannot read the operators of {batch.path}: "
                             f"{str(e).splitlines()[0]}") from e
    for row in meta:
        if row.operatorName not in (*_TWS, spark_join.SPARK_OPERATOR):
            raise SavepointError(
                f"operator {row.operatorId} ({row.operatorName}) keeps Spark's own state, "
                "which a query cannot start from; savepoints carry transformWithState "
                "operators (every headrace operator) and interval_join's state from "
                "before it moved onto transformWithState (Spark's stream-stream join)")
    sink = sink_markers(bootstrap_servers, batch.query_id, client_configs) \
        if bootstrap_servers else {}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        try:
            operators = [_copy_operator(spark, batch.path, batch.batch_id, row, tmp)
                         for row in sorted(meta, key=lambda r: r.operatorId)
                         if row.operatorName in _TWS]
            # Spark's join: one metadata row per state store, four per operator
            joins: dict[int, list[Any]] = {}
            for row in meta:
                if row.operatorName == spark_join.SPARK_OPERATOR:
                    joins.setdefault(row.operatorId, []).append(row)
            operators += [spark_join.copy(spark, batch.path, batch.batch_id, op_id,
                                          rows[0].numPartitions,
                                          {r.stateStoreName for r in rows}, tmp)
                          for op_id, rows in joins.items()]
            operators.sort(key=lambda o: o.operator_id)
            if replay is not None:
                write_ids(tmp, *replay)
        except PySparkException as e:
            # e.g. a checkpoint moved since it was written: transformWithState's metadata
            # names its schema files by absolute path
            raise SavepointError(f"Spark cannot read the state of {batch.path}: "
                                 f"{str(e).splitlines()[0]}") from e
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            checkpoint=str(batch.path), query_id=batch.query_id, batch_id=batch.batch_id,
            shuffle_partitions=batch.shuffle_partitions, watermark_ms=batch.watermark_ms,
            sources=batch.sources, operators=tuple(operators), sink=sink,
            headrace_version=headrace.__version__, spark_version=pyspark.__version__,
            realtime_sink=None if replay is None else replay[0])
        with open(tmp / MANIFEST, "w") as f:
            f.write(manifest.to_json())
            f.flush()
            os.fsync(f.fileno())
        _fsync(tmp)
        os.rename(tmp, out)
        _fsync(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _columns(df: DataFrame) -> DataFrame:
    """A state variable's rows as flat columns: the key's and the value's fields. A JVM
    operator's value state (string key, binary value, perhaps with a TTL: both structs
    hold one field named ``value``) becomes ``JVM_KEY`` and ``JVM_STATE``; a TTL's
    expiry is not kept (a query started from the savepoint counts its TTL afresh)."""
    value = df.schema["value"].dataType
    assert isinstance(value, StructType)
    if "ttlExpirationMs" in value.fieldNames():
        df = df.select("key", F.col("value.value").alias("value"))
    key, value = df.schema["key"].dataType, df.schema["value"].dataType
    assert isinstance(key, StructType) and isinstance(value, StructType)
    if key.fieldNames() == ["value"] and value.fieldNames() == ["value"]:
        return df.select(F.col("key.value").alias(JVM_KEY), F.col("value.value").alias(JVM_STATE))
    return df.select("key.*", "value.*")


def _copy_operator(spark: SparkSession, checkpoint: Path, batch_id: int, row: Any,
                   tmp: Path) -> Operator:
    props = json.loads(row.operatorProperties or "{}")
    names = [v["stateName"] for v in props.get("stateVariables", [])
             if not v["stateName"].startswith("$")]  # timers: kept in headrace's values
    variables = []
    key_schema: dict[str, Any] = {}
    head: dict[str, Any] | None = None
    for name in names:
        df = spark.read.format("statestore").option("operatorId", row.operatorId) \
            .option("stateVarName", name).option("batchId", batch_id).load(str(checkpoint))
        key_schema = json.loads(df.schema["key"].dataType.json())
        file = f"operators/{row.operatorId}/{name}.parquet"
        _columns(df).coalesce(1).write.parquet(str(tmp / file))
        # Hadoop's local checksums: a savepoint is plain Parquet, which other tools may
        # read or rewrite (a stale .crc would then fail Spark's read)
        for crc in (tmp / file).glob(".*.crc"):
            crc.unlink()
        rows, keys, found = _describe(tmp / file)
        head = head or found
        variables.append(StateVariable(name, file, rows, keys, _size(tmp / file)))
    head = head or {}
    return Operator(operator_id=row.operatorId, spark_operator=row.operatorName,
                    name=head.get("operator", ""),
                    schema_version=int(head.get("version", LEGACY_VERSION)),
                    params=head.get("params", {}), key_schema=key_schema,
                    partitions=row.numPartitions, variables=tuple(variables))
