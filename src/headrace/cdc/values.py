"""PostgreSQL text-format values to the JSON that Debezium's PostgreSQL connector emits
(its defaults: ``decimal.handling.mode=precise``, ``time.precision.mode=adaptive``,
``binary.handling.mode=bytes`` with JSON's base64).

- booleans, integers, floats: JSON booleans and numbers;
- numeric: ``precise`` gives base64 of the unscaled value's big-endian two's complement
  (Debezium's ``Decimal``); ``string`` and ``double`` as Debezium's other modes;
- date: days since the epoch; time: microseconds since midnight; timestamp: milliseconds
  since the epoch for precision <= 3, else microseconds; timestamptz / timetz: ISO-8601
  strings in UTC with the column's precision in fraction digits (``ZonedTimestamp`` /
  ``ZonedTime``);
- json, jsonb, uuid, text types, interval, inet and the rest: strings;
- bytea: base64; one-dimensional arrays of any of these: JSON arrays.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

BOOL, BYTEA, INT8, INT2, INT4, OID = 16, 17, 20, 21, 23, 26
FLOAT4, FLOAT8, NUMERIC = 700, 701, 1700
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, TIMETZ = 1082, 1083, 1114, 1184, 1266
ARRAYS = {1000: BOOL, 1001: BYTEA, 1005: INT2, 1007: INT4, 1016: INT8, 1021: FLOAT4,
          1022: FLOAT8, 1231: NUMERIC, 1182: DATE, 1183: TIME, 1115: TIMESTAMP,
          1185: TIMESTAMPTZ, 1009: 25, 1015: 1043, 1014: 1042, 2951: 2950, 199: 114,
          3807: 3802}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
DECIMAL_MODES = ("precise", "string", "double")


def converter(type_oid: int, type_modifier: int = -1,
              decimal_mode: str = "precise") -> Callable[[str], Any]:
    """The function turning one text value of this type into its JSON value."""
    if type_oid in ARRAYS:
        element = converter(ARRAYS[type_oid], type_modifier, decimal_mode)
        return lambda text: [None if v is None else element(v) for v in parse_array(text)]
    if type_oid == BOOL:
        return lambda text: text in ("t", "true")  # pgoutput says t, a ::text cast true
    if type_oid in (INT2, INT4, INT8, OID):
        return int
    if type_oid in (FLOAT4, FLOAT8):
        return _float
    if type_oid == NUMERIC:
        return _numeric(decimal_mode)
    if type_oid == DATE:
        return lambda text: (dt.date.fromisoformat(text) - dt.date(1970, 1, 1)).days
    if type_oid == TIME:
        return _time_micros
    if type_oid == TIMESTAMP:
        millis = 0 <= type_modifier <= 3
        return lambda text: _timestamp(text, millis)
    digits = type_modifier if 0 <= type_modifier <= 6 else 6
    if type_oid == TIMESTAMPTZ:
        return lambda text: _zoned_timestamp(text, digits)
    if type_oid == TIMETZ:
        return lambda text: _zoned_time(text, digits)
    if type_oid == BYTEA:
        return lambda text: base64.b64encode(bytes.fromhex(text[2:])).decode()
    return str


def _float(text: str) -> Any:
    value = float(text)
    return text if value != value or value in (float("inf"), float("-inf")) else value


def _numeric(mode: str) -> Callable[[str], Any]:
    def precise(text: str) -> Any:
        try:
            number = Decimal(text)
        except InvalidOperation:
            return text
        if not number.is_finite():
            return text  # NaN, Infinity: no unscaled form
        sign, digits, exponent = number.as_tuple()
        assert isinstance(exponent, int)
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        if exponent > 0:
            unscaled *= 10 ** exponent
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()

    if mode == "string":
        return str
    if mode == "double":
        return float
    return precise


def _parse_timestamp(text: str) -> dt.datetime:
    if text in ("infinity", "-infinity"):
        raise ValueError(text)
    return dt.datetime.fromisoformat(text.replace(" ", "T"))


def _timestamp(text: str, millis: bool) -> Any:
    try:
        moment = _parse_timestamp(text).replace(tzinfo=dt.UTC)
    except ValueError:
        return text
    micros = (moment - EPOCH) // dt.timedelta(microseconds=1)
    return micros // 1000 if millis else micros


def _zoned_timestamp(text: str, digits: int) -> Any:
    try:
        moment = _parse_timestamp(_full_offset(text)).astimezone(dt.UTC)
    except ValueError:
        return text
    return _iso(moment.strftime("%Y-%m-%dT%H:%M:%S"), moment.microsecond, digits)


def _full_offset(text: str) -> str:
    """PostgreSQL prints offsets as +02 or +05:30; Python wants +02:00."""
    for sign in "+-":
        cut = text.rfind(sign)
        if cut > 10 and len(text) - cut == 3:
            return text + ":00"
    return text


def _iso(base: str, micros: int, digits: int) -> str:
    """Debezium's ZonedTimestamp: as many fraction digits as the column's precision."""
    fraction = f"{micros:06d}"[:digits]
    return f"{base}.{fraction}Z" if fraction else f"{base}Z"


def _time_micros(text: str) -> int:
    t = dt.time.fromisoformat(text)
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def _zoned_time(text: str, digits: int) -> str:
    moment = dt.datetime.fromisoformat("2000-01-01T" + _full_offset(text)).astimezone(dt.UTC)
    return _iso(moment.strftime("%H:%M:%S"), moment.microsecond, digits)


def parse_array(text: str) -> list[str | None]:
    """A one-dimensional PostgreSQL array literal (``{1,2,NULL}``, ``{"a b",c}``)."""
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"not an array literal: {text!r}")
    body = text[1:-1]
    items: list[str | None] = []
    i = 0
    while i < len(body):
        if body[i] == '"':
            out = []
            i += 1
            while body[i] != '"':
                if body[i] == "\\":
                    i += 1
                out.append(body[i])
                i += 1
            items.append("".join(out))
            i += 2  # closing quote and comma
        else:
            end = body.find(",", i)
            end = len(body) if end < 0 else end
            raw = body[i:end]
            items.append(None if raw == "NULL" else raw)
            i = end + 1
    return items
