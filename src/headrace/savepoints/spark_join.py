"""Spark's own stream-stream join state, carried by a savepoint for ``interval_join``.

Until its state schema version 1, ``interval_join`` was Spark's own stream-stream join
(``symmetricHashJoin``): the left stream joined with the right one whose join columns
were renamed ``__r_<column>``. Spark keeps each side's rows in two state stores,
``<side>-keyToNumValues`` (join key -> how many rows) and ``<side>-keyWithIndexToValue``
((join key, index) -> the row and whether it has ``matched`` a row of the other side).
``copy`` reads both through Spark's state data source (the rows whose index is below
their key's count: what ``option("joinSide", side)`` reads, plus ``matched``, which that
option leaves out but a left outer join needs) and writes, as the savepoint's state of
an operator named ``interval_join`` at schema version ``VERSION`` (0), one Parquet file
per side: the side's columns by their names in the query (``__r_`` taken off) and
``matched``.

``interval_join(from_savepoint=...)`` turns those rows into its own buckets (with its own
``buckets``, which Spark's join did not have), so that a query of today's operator goes on
where Spark's join stopped: rows held are matched by later rows, unmatched left rows of a
left outer join come out once, when the watermark passes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from headrace.savepoints.errors import SavepointError
from headrace.savepoints.manifest import Operator, StateVariable

SPARK_OPERATOR = "symmetricHashJoin"
NAME = "interval_join"
VERSION = 0
"""The state schema version of ``interval_join`` on Spark's own join."""
SIDES = ("left", "right")
MATCHED = "matched"
RIGHT_PREFIX = "__r_"


def _side(spark: SparkSession, checkpoint: Path, operator_id: int, batch_id: int,
          side: str) -> DataFrame:
    """One side's rows as Spark's join holds them: value columns and ``matched``."""
    def store(name: str) -> DataFrame:
        return spark.read.format("statestore").option("operatorId", operator_id) \
            .option("storeName", f"{side}-{name}").option("batchId", batch_id) \
            .load(str(checkpoint))
    values, counts = store("keyWithIndexToValue"), store("keyToNumValues")
    key_type = values.schema["key"].dataType
    assert isinstance(key_type, StructType)
    key_fields = [f for f in key_type.fieldNames() if f != "index"]
    values = values.select(F.struct(*[F.col("key")[f].alias(f) for f in key_fields])
                           .alias("k"), F.col("key.index").alias("i"), "value",
                           F.col("partition_id").alias("p"))
    counts = counts.select(F.col("key").alias("k"), F.col("value.value").alias("n"),
                           F.col("partition_id").alias("p"))
    held = values.join(counts, values.k.eqNullSafe(counts.k) & (values.p == counts.p)) \
        .where((values.i < counts.n) & values.value.isNotNull())
    return held.select("value.*")


def copy(spark: SparkSession, checkpoint: Path, batch_id: int, operator_id: int,
         partitions: int, stores: set[str], tmp: Path) -> Operator:
    """Write operator ``operator_id`` (Spark's join, whose state stores are ``stores``)
    into the savepoint folder ``tmp``; its manifest entry. Raises ``SavepointError`` for
    a join whose state is not laid out as Spark 4's join state format 2."""
    wanted = {f"{s}-{n}" for s in SIDES for n in ("keyToNumValues", "keyWithIndexToValue")}
    if stores != wanted:
        raise SavepointError(
            f"operator {operator_id} ({SPARK_OPERATOR}): state stores {sorted(stores)} are "
            f"not Spark's stream-stream join state this headrace reads ({sorted(wanted)})")
    variables, columns = [], {}
    sides = {side: _side(spark, checkpoint, operator_id, batch_id, side) for side in SIDES}
    # the join columns: the right side's renamed ones (Spark names the key's fields field0..)
    key = [c[len(RIGHT_PREFIX):] for c in sides["right"].columns if c.startswith(RIGHT_PREFIX)]
    if not key:
        raise SavepointError(
            f"operator {operator_id} ({SPARK_OPERATOR}): its right side has no join column "
            f"named {RIGHT_PREFIX}<column>; only interval_join's own join can carry over")
    for side, df in sides.items():
        if side == "right":
            df = df.select(*[F.col(c).alias(c[len(RIGHT_PREFIX):]) if c.startswith(RIGHT_PREFIX)
                             else F.col(c) for c in df.columns if c != MATCHED])
        columns[side] = [c for c in df.columns if c != MATCHED]
        file = f"operators/{operator_id}/{side}.parquet"
        df.coalesce(1).write.parquet(str(tmp / file))
        for crc in (tmp / file).glob(".*.crc"):  # as create's other files: plain Parquet
            crc.unlink()
        written = spark.read.parquet(str(tmp / file))
        rows, keys = written.count(), written.select(*key).distinct().count()
        size = sum(f.stat().st_size for f in (tmp / file).rglob("*") if f.is_file())
        variables.append(StateVariable(side, file, rows, keys, size))
    params: dict[str, Any] = {"key": key, **columns}
    return Operator(operator_id=operator_id, spark_operator=SPARK_OPERATOR, name=NAME,
                    schema_version=VERSION, params=params, key_schema={},
                    partitions=partitions, variables=tuple(variables))
