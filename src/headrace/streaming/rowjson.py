"""Rows crossing a Python transformWithState as JSON text, shared by the joins.

Spark's ``to_json`` before the operator and ``from_json`` after it are lossless both ways
for every type they take (timestamps to the microsecond, with ``OPTIONS``); a map with
non-string keys is the one exception (``from_json`` reads string keys only), refused
before the query starts by ``check_json_safe``.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructType

from headrace.streaming.errors import SpecError

OPTIONS = {"ignoreNullFields": "false", "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
           "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}


def as_json(columns: list[str]) -> Column:
    """``columns`` as one JSON object (nulls kept)."""
    return F.to_json(F.struct(*[F.col(c) for c in columns]), OPTIONS)


def check_json_safe(side: str, schema: StructType) -> None:
    """Raise ``SpecError`` for a map with non-string keys anywhere in ``schema``."""
    def walk(t: DataType, path: str) -> None:
        if isinstance(t, MapType):
            if not isinstance(t.keyType, StringType):
                raise SpecError(f"the {side} stream's {path} is a map with "
                                f"{t.keyType.simpleString()} keys; the stream-table joins "
                                "carry maps with string keys only (cast the keys)")
            walk(t.valueType, path)
        elif isinstance(t, ArrayType):
            walk(t.elementType, path)
        elif isinstance(t, StructType):
            for f in t.fields:
                walk(f.dataType, f"{path}.{f.name}" if path else f.name)
    walk(schema, "")


def key_bucket(key: list[str], n: int) -> Column:
    """The bucket of a join key: equal keys, equal bucket, on both sides of a join."""
    return F.pmod(F.xxhash64(*key), F.lit(n))
