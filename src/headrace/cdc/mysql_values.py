"""MySQL/MariaDB column values as Debezium's MySQL connector writes them (JSON converter,
default settings: ``decimal.handling.mode=precise``, ``time.precision.mode=
adaptive_time_microseconds``, ``bigint.unsigned.handling.mode=long``,
``binary.handling.mode=bytes``).

A column's type (``ColumnType``) comes from two places: ``information_schema.COLUMNS``
for the snapshot (``from_catalog``) and each binlog TABLE_MAP event's metadata for the
stream (``from_binlog``: what the table looked like when the change was written, so DDL is
followed without a schema history). ``convert`` takes the Python value either reader gives
(PyMySQL for the snapshot, python-mysql-replication for the binlog) and returns the JSON
value.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Any

from headrace.cdc.errors import CdcConfigError

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_INTS = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
_BYTES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
KINDS = ("int", "decimal", "float", "double", "bit", "date", "time", "datetime", "timestamp",
         "year", "string", "bytes", "enum", "set", "json")


@dataclass(frozen=True)
class ColumnType:
    """What Debezium's mapping of one column depends on."""

    kind: str
    unsigned: bool = False
    bits: int = 0
    """BIT(n): n."""
    fsp: int = 0
    """Fractional seconds precision of TIME, DATETIME and TIMESTAMP."""
    scale: int = 0
    """DECIMAL(p, s): s."""
    values: tuple[str, ...] = ()
    """ENUM and SET: the permitted values, in definition order."""
    length: int = 0
    """BINARY(n): n (the binlog drops its trailing zero bytes; Debezium pads them back)."""
    streamed: bool = False
    """From the binlog (``from_binlog``), not the catalog: Debezium formats a TIMESTAMP's
    fraction differently in the two."""


def from_catalog(data_type: str, column_type: str, scale: int | None, fsp: int | None,
                 precision: int | None) -> ColumnType:
    """From ``information_schema.COLUMNS`` (DATA_TYPE, COLUMN_TYPE, NUMERIC_SCALE,
    DATETIME_PRECISION, NUMERIC_PRECISION). ``CdcConfigError`` for a type not mapped."""
    t = data_type.lower()
    unsigned = "unsigned" in column_type.lower()
    if t in _INTS:
        return ColumnType("int", unsigned)
    if t in ("decimal", "numeric"):
        return ColumnType("decimal", unsigned, scale=scale or 0)
    if t in ("float", "double"):
        return ColumnType(t, unsigned)
    if t == "real":
        return ColumnType("double", unsigned)
    if t == "bit":
        return ColumnType("bit", bits=precision or 1)
    if t in ("date", "time", "datetime", "timestamp", "year"):
        return ColumnType(t, fsp=fsp or 0)
    if t in _TEXT:
        return ColumnType("string")
    if t in _BYTES:
        return ColumnType("bytes")
    if t in ("enum", "set"):
        inner = column_type[column_type.index("(") + 1:column_type.rindex(")")]
        return ColumnType(t, values=_quoted_list(inner))
    if t == "json":
        return ColumnType("json")
    raise CdcConfigError(f"MySQL type {column_type} is not supported by headrace cdc mysql")


def _quoted_list(text: str) -> tuple[str, ...]:
    """``'a','b''c'`` -> ('a', "b'c")."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "'":
            i += 1
            continue
        j, buf = i + 1, []
        while j < len(text):
            if text[j] == "'" and j + 1 < len(text) and text[j + 1] == "'":
                buf.append("'")
                j += 2
            elif text[j] == "'":
                break
            else:
                buf.append(text[j])
                j += 1
        out.append("".join(buf))
        i = j + 1
    return tuple(out)


def from_binlog(column: Any) -> ColumnType:
    """From a python-mysql-replication ``Column`` of a TABLE_MAP event (needs
    ``binlog_row_metadata=FULL`` for signedness, charsets and ENUM/SET values)."""
    from pymysqlreplication.constants import FIELD_TYPE

    ct = _streamed
    t = column.type
    unsigned = bool(column.unsigned)
    if t in (FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.INT24, FIELD_TYPE.LONG,
             FIELD_TYPE.LONGLONG):
        return ct("int", unsigned)
    if t == FIELD_TYPE.NEWDECIMAL:
        return ct("decimal", unsigned, scale=column.decimals)
    if t == FIELD_TYPE.FLOAT:
        return ct("float", unsigned)
    if t == FIELD_TYPE.DOUBLE:
        return ct("double", unsigned)
    if t == FIELD_TYPE.BIT:
        return ct("bit", bits=column.bits)
    if t in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
        return ct("date")
    if t in (FIELD_TYPE.TIME, FIELD_TYPE.TIME2):
        return ct("time", fsp=getattr(column, "fsp", 0))
    if t in (FIELD_TYPE.DATETIME, FIELD_TYPE.DATETIME2):
        return ct("datetime", fsp=getattr(column, "fsp", 0))
    if t in (FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2):
        return ct("timestamp", fsp=getattr(column, "fsp", 0))
    if t == FIELD_TYPE.YEAR:
        return ct("year")
    if t == FIELD_TYPE.ENUM:
        return ct("enum", values=tuple(column.enum_values or ()))
    if t == FIELD_TYPE.SET:
        return ct("set", values=tuple(column.set_values or ()))
    if t == FIELD_TYPE.JSON:
        return ct("json")
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.VAR_STRING, FIELD_TYPE.BLOB):
        if (column.character_set_name or "").lower() != "binary":
            return ct("string")
        fixed = column.max_length if t == FIELD_TYPE.STRING else 0
        return ct("bytes", length=fixed)
    raise CdcConfigError(f"MySQL column {column.name} of binlog type {t} is not supported")


def _streamed(kind: str, unsigned: bool = False, bits: int = 0, fsp: int = 0, scale: int = 0,
              values: tuple[str, ...] = (), length: int = 0) -> ColumnType:
    return ColumnType(kind, unsigned, bits, fsp, scale, values, length, streamed=True)


def convert(col: ColumnType, value: Any) -> Any:
    """The JSON value Debezium writes for ``value`` (None stays None)."""
    if value is None:
        return None
    kind = col.kind
    if kind == "int" or kind == "year":
        v = int(value)
        return v - (1 << 64) if v >= 1 << 63 else v  # BIGINT UNSIGNED as a wrapped long
    if kind == "decimal":
        with localcontext() as ctx:
            ctx.prec = 100  # DECIMAL has 65 digits at most: no rounding here
            d = Decimal(value).quantize(Decimal(1).scaleb(-col.scale))
            unscaled = int(d.scaleb(col.scale))
        size = (unscaled + (unscaled < 0)).bit_length() // 8 + 1  # BigInteger.toByteArray
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
    if kind == "float":
        return _float32(float(value))
    if kind == "double":
        return float(value)
    if kind == "bit":
        n = int(value, 2) if isinstance(value, str) else int.from_bytes(value, "big")
        if col.bits == 1:
            return bool(n)
        return base64.b64encode(n.to_bytes((col.bits + 7) // 8, "little")).decode()
    if kind == "date":
        return (value - _EPOCH_DATE).days
    if kind == "time":
        return _micros(value)
    if kind == "datetime":
        micros = _micros(value - _EPOCH)
        return micros // 1000 if col.fsp <= 3 else micros
    if kind == "timestamp":
        # Debezium: from the binlog, the column's fsp digits; from the snapshot, Java's ISO
        # format (the fraction without trailing zeros, none when zero)
        fraction = f"{value.microsecond:06d}"
        fraction = fraction[:col.fsp] if col.streamed else fraction.rstrip("0")
        return value.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"
    if kind == "bytes":
        raw = value if isinstance(value, bytes) else str(value).encode()
        raw = raw.ljust(col.length, b"\0")
        return base64.b64encode(raw).decode()
    if kind == "set":
        members = value.split(",") if isinstance(value, str) else list(value)
        chosen = set(members) - {""}
        return ",".join(v for v in col.values if v in chosen)
    if kind == "json" and not isinstance(value, str | bytes):
        # MySQL's binary JSON, decoded by the binlog reader (MariaDB's JSON is text)
        return json.dumps(_text_keys(value), separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def _text_keys(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {_text_keys(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_text_keys(v) for v in value]
    return value


def _micros(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _float32(value: float) -> float:
    """The shortest decimal that reads back as the same float32 (Java's Float.toString,
    as Jackson writes a FLOAT32 field), not the float64 expansion of its bits."""
    bits = struct.pack("<f", value)
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        try:
            if struct.pack("<f", candidate) == bits:
                return candidate
        except OverflowError:  # rounded past the largest float32 (near ±3.4e38)
            continue
    return value
