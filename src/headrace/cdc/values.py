"""PostgreSQL text-format values to the JSON that Debezium's PostgreSQL connector emits,
under its settings ``decimal.handling.mode`` (precise, string, double) and
``time.precision.mode`` (adaptive, connect), ``binary.handling.mode=bytes`` (JSON's
base64), ``interval.handling.mode=numeric`` and ``hstore.handling.mode=json``.

The mappings (checked value by value against Debezium 3.6's embedded engine,
``tests/cdc/test_types.py``):

- booleans, integers, oid, floats: JSON booleans and numbers (NaN, Infinity, -Infinity as
  strings, as Jackson writes them; a real as the shortest decimal of its 32-bit float);
- numeric(p,s) and money: ``precise`` base64 of the unscaled value's big-endian two's
  complement (Kafka Connect's ``Decimal``), NaN and infinities null; plain numeric:
  ``{"scale", "value"}`` (Debezium's ``VariableScaleDecimal``); ``string``: the digits
  (NaN ``NAN``, infinities ``POSITIVE_INFINITY``/``NEGATIVE_INFINITY``); ``double``: a number;
- date: days since the epoch (the infinities as Debezium's overflowed day counts); time:
  milliseconds since midnight for precision <= 3, else microseconds (``connect``:
  milliseconds always); timestamp likewise since the epoch; timestamptz / timetz: ISO-8601
  strings in UTC (``ZonedTimestamp`` with the column's precision in fraction digits,
  ``ZonedTime`` without trailing zeros); interval: microseconds, a month being 30.4375
  days (``MicroDuration``);
- bit(1): a boolean; bit(n), varbit: the bits as a little-endian number's bytes (base64);
- point: ``{"x", "y", "wkb", "srid"}``; hstore: a JSON object as a string;
- bytea: base64; one-dimensional arrays: JSON arrays of their element's values (a bytea
  element as base64 of its text form, as Debezium does);
- enums, domains (as their base type), json, jsonb, xml, uuid, text types, inet, cidr,
  macaddr, ranges, tsvector, ltree, citext and the rest: strings;
- line, lseg, box, path, polygon, circle, tsquery: left out of the event, as Debezium
  leaves out the types it does not know (``converter`` returns None).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

BOOL, BYTEA, INT8, INT2, INT4, TEXT, OID = 16, 17, 20, 21, 23, 25, 26
POINT, FLOAT4, FLOAT8, MONEY, NUMERIC = 600, 700, 701, 790, 1700
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, TIMETZ = 1082, 1083, 1114, 1184, 1186, 1266
BIT, VARBIT, UUID = 1560, 1562, 2950
ARRAYS = {1000: BOOL, 1001: BYTEA, 1005: INT2, 1007: INT4, 1016: INT8, 1021: FLOAT4,
          1022: FLOAT8, 1231: NUMERIC, 1182: DATE, 1183: TIME, 1115: TIMESTAMP,
          1185: TIMESTAMPTZ, 1009: 25, 1015: 1043, 1014: 1042, 2951: 2950, 199: 114,
          3807: 3802, 1041: 869, 651: 650, 1040: 829, 1028: 26, 1270: 1266, 1187: 1186,
          791: 790, 1561: 1560, 1563: 1562}
UNKNOWN_TO_DEBEZIUM = frozenset({"line", "lseg", "box", "path", "polygon", "circle",
                                 "tsquery"})
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
DECIMAL_MODES = ("precise", "string", "double")
TIME_MODES = ("adaptive", "connect")
# What Debezium makes of the infinities: the PostgreSQL JDBC driver's sentinels
# (9223372036825200000 and -9223372036832400000 "milliseconds") for timestamps, and for
# dates the streamed day count overflowed from PostgreSQL's internal INT_MAX/INT_MIN.
_TS_INFINITY = {"infinity": 9223372036825200000, "-infinity": -9223372036832400000}
_DATE_INFINITY = {"infinity": -2147472692, "-infinity": -2147472691}
SNAPSHOT_DATE_INFINITY = {"infinity": -622191234, "-infinity": -625821272}
"""Debezium's snapshot reads dates through JDBC: other overflowed day counts."""
_DAYS_PER_MONTH = 365.25 / 12
Converter = Callable[[str], Any]
UNAVAILABLE = "__debezium_unavailable_value"
"""Debezium's placeholder for an unchanged TOASTed value PostgreSQL did not send."""


@dataclass(frozen=True)
class TypeInfo:
    """One ``pg_type`` row: what a type oid that is not built in resolves to."""

    name: str
    kind: str  # typtype: b base, e enum, d domain, r range, ...
    base: int = 0  # a domain's base type
    base_modifier: int = -1
    element: int = 0  # an array's element type


TypeCatalog = Mapping[int, TypeInfo]


def converter(type_oid: int, type_modifier: int = -1, decimal_mode: str = "precise",
              time_mode: str = "adaptive", types: TypeCatalog | None = None
              ) -> Converter | None:
    """The function turning one text value of this type into its JSON value; None for a
    type Debezium leaves out of its events."""
    info = (types or {}).get(type_oid)
    if info is not None and info.kind == "d":
        modifier = info.base_modifier if type_modifier < 0 else type_modifier
        return converter(info.base, modifier, decimal_mode, time_mode, types)
    element_oid = ARRAYS.get(type_oid) or (info.element if info is not None else 0)
    if element_oid:
        element = converter(element_oid, type_modifier, decimal_mode, time_mode, types)
        if element is None:
            return None
        if element_oid == DATE:  # arrays go through JDBC: other infinities
            element = _array_date
        elif element_oid == NUMERIC and type_modifier < 4:
            element = _numeric(decimal_mode, None, in_array=True)
        return _array(element)
    if info is not None:
        if info.name in UNKNOWN_TO_DEBEZIUM:
            return None
        if info.name == "hstore":
            return _hstore
        return str
    return _builtin(type_oid, type_modifier, decimal_mode, time_mode)


def _builtin(oid: int, modifier: int, decimal_mode: str, time_mode: str) -> Converter:
    if oid == BOOL:
        return lambda text: text in ("t", "true")
    if oid in (INT2, INT4, INT8, OID):
        return int
    if oid == FLOAT4:
        return _float4
    if oid == FLOAT8:
        return _float
    if oid == NUMERIC:
        scale = (modifier - 4) & 0xFFFF if modifier >= 4 else None
        return _numeric(decimal_mode, scale)
    if oid == MONEY:
        number = _numeric(decimal_mode, 2)
        return lambda text: number(_money(text))
    if oid == DATE:
        return _date
    connect = time_mode == "connect"
    millis = connect or 0 <= modifier <= 3
    if oid == TIME:
        return lambda text: _time_micros(text) // (1000 if millis else 1)
    if oid == TIMESTAMP:
        return lambda text: _timestamp(text, millis)
    digits = modifier if 0 <= modifier <= 6 else 6
    if oid == TIMESTAMPTZ:
        return lambda text: _zoned_timestamp(text, digits)
    if oid == TIMETZ:
        return _zoned_time
    if oid == INTERVAL:
        return _interval
    if oid == BYTEA:
        return lambda text: base64.b64encode(bytes.fromhex(text[2:])).decode()
    if oid == BIT and modifier == 1:
        return lambda text: text == "1"
    if oid in (BIT, VARBIT):
        return _bits
    if oid == POINT:
        return _point
    return str


def _array(element: Converter) -> Converter:
    def convert(text: str) -> Any:
        try:
            return [None if v is None else element(v) for v in parse_array(text)]
        except _Unrepresentable:
            return None  # Debezium: NaN in a plain numeric array drops the whole array
    return convert


def _array_date(text: str) -> int:
    return SNAPSHOT_DATE_INFINITY.get(text) or _date(text)


class _Unrepresentable(ValueError):
    """A value Debezium has no form for (NaN or an infinity in a plain numeric array)."""


def _float(text: str) -> Any:
    value = float(text)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _float4(text: str) -> Any:
    """Java prints a float with the fewest digits (but two at least) that give the same
    32-bit value back."""
    value = _float(text)
    if isinstance(value, str) or value == 0:
        return value
    exact = struct.unpack("<f", struct.pack("<f", value))[0]
    for digits in range(2, 10):
        shortest = float(f"{exact:.{digits}g}")
        if struct.unpack("<f", struct.pack("<f", shortest))[0] == exact:
            return shortest
    return exact


_SPECIAL = {"NaN": "NAN", "Infinity": "POSITIVE_INFINITY", "-Infinity": "NEGATIVE_INFINITY"}


def _numeric(mode: str, scale: int | None, in_array: bool = False) -> Converter:
    """``scale`` None: plain numeric (each value keeps its own scale)."""
    def precise(text: str) -> Any:
        if text in _SPECIAL:
            return None  # no unscaled form for NaN or the infinities
        sign, digits, exponent = Decimal(text).as_tuple()
        assert isinstance(exponent, int)
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        if scale is None:  # Debezium strips trailing zeros down to scale 0
            while exponent < 0 and unscaled % 10 == 0:
                unscaled //= 10
                exponent += 1
            target = max(0, -exponent)
        else:
            target = scale
        unscaled *= 10 ** (exponent + target) if exponent + target >= 0 else 1
        size = (unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()) // 8 + 1
        value = base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
        return value if scale is not None else {"scale": target, "value": value}

    modes: dict[str, Converter] = {"string": lambda text: _SPECIAL.get(text, text),
                                   "double": _float}
    convert = modes.get(mode, precise)
    if not in_array:
        return convert

    def element(text: str) -> Any:
        if text in _SPECIAL:
            raise _Unrepresentable(text)
        return convert(text)
    return element


def _money(text: str) -> str:
    """``-$1,234.50`` (lc_monetary C) to ``-1234.50``."""
    negative = text.startswith("-") or text.startswith("(")
    digits = re.sub(r"[^0-9.]", "", text)
    return f"-{digits}" if negative else digits


def _date(text: str) -> int:
    if text in _DATE_INFINITY:
        return _DATE_INFINITY[text]
    if text.endswith(" BC"):
        year, rest = text[:-3].split("-", 1)
        return _proleptic_days(1 - int(year), rest)
    return (dt.date.fromisoformat(text) - dt.date(1970, 1, 1)).days


def _proleptic_days(year: int, month_day: str) -> int:
    """Days since the epoch of a date before year 1 (proleptic Gregorian, ISO year)."""
    month, day = map(int, month_day.split("-"))
    shift = 400 * (1 - year // 400)  # the calendar repeats every 400 years (146097 days)
    moved = dt.date(year + shift, month, day)
    return (moved - dt.date(1970, 1, 1)).days - shift // 400 * 146097


def _parse_timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace(" ", "T"))


def _timestamp(text: str, millis: bool) -> Any:
    if text in _TS_INFINITY:
        value = _TS_INFINITY[text]
        return value // 1000 if millis else value
    moment = _parse_timestamp(text).replace(tzinfo=dt.UTC)
    micros = (moment - EPOCH) // dt.timedelta(microseconds=1)
    return micros // 1000 if millis else micros


def _zoned_timestamp(text: str, digits: int) -> Any:
    if text in _TS_INFINITY:
        return text
    moment = _parse_timestamp(_full_offset(text)).astimezone(dt.UTC)
    fraction = f"{moment.microsecond:06d}"[:digits]
    base = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{fraction}Z" if fraction else f"{base}Z"


def _full_offset(text: str) -> str:
    """PostgreSQL prints offsets as +02, +05:30 or -14:59:10; Python wants +02:00."""
    for sign in "+-":
        cut = text.rfind(sign)
        if cut > 7 and len(text) - cut == 3:
            return text + ":00"
    return text


def _time_micros(text: str) -> int:
    if text.startswith("24:00:00"):
        return 86_400_000_000
    t = dt.time.fromisoformat(text)
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def _zoned_time(text: str) -> str:
    """Debezium's ZonedTime: the time in UTC, the fraction without trailing zeros."""
    cut = max(text.rfind("+"), text.rfind("-"))
    local, offset = text[:cut], text[cut:]
    parts = [int(p) for p in offset[1:].split(":")] + [0, 0]
    offset_s = (parts[0] * 3600 + parts[1] * 60 + parts[2]) * (1 if offset[0] == "+" else -1)
    micros = (_time_micros(local) - offset_s * 1_000_000) % 86_400_000_000
    seconds, fraction = divmod(micros, 1_000_000)
    base = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    digits = f"{fraction:06d}".rstrip("0")
    return f"{base}.{digits}Z" if digits else f"{base}Z"


_INTERVAL_UNIT = re.compile(r"(-?\d+) (year|mon|day)s?")
_INTERVAL_TIME = re.compile(r"(-?)(\d+):(\d\d):(\d\d(?:\.\d+)?)")


def _interval(text: str) -> int:
    """Debezium's MicroDuration (a month is 365.25 / 12 days), in Java's double arithmetic,
    saturating as Java's cast to long does."""
    units = {"year": 0, "mon": 0, "day": 0}
    for count, unit in _INTERVAL_UNIT.findall(text):
        units[unit] = int(count)
    hours = minutes = 0
    seconds = 0.0
    found = _INTERVAL_TIME.search(text)
    if found:
        sign = -1 if found.group(1) else 1
        hours, minutes = sign * int(found.group(2)), sign * int(found.group(3))
        seconds = sign * float(found.group(4))
    days = (units["year"] * 12 + units["mon"]) * _DAYS_PER_MONTH + units["day"]
    total = (((days * 24 + hours) * 60) + minutes) * 60 + seconds
    micros = total * 1e6
    return max(-(2**63), min(2**63 - 1, int(micros)))


def _bits(text: str) -> str:
    """Debezium's Bits: the number the bits spell, as little-endian bytes (none for 0)."""
    value = int(text, 2) if text else 0
    return base64.b64encode(value.to_bytes((value.bit_length() + 7) // 8, "little")).decode()


def _point(text: str) -> dict[str, Any]:
    x, y = (float(v) for v in text.strip("()").split(","))
    wkb = struct.pack("<bIdd", 1, 1, x, y)
    return {"x": x, "y": y, "wkb": base64.b64encode(wkb).decode(), "srid": None}


def _hstore(text: str) -> str:
    """``"a"=>"1", "b"=>NULL`` as Debezium's JSON (hstore.handling.mode=json)."""
    pairs: dict[str, str | None] = {}
    for key, value, null in re.findall(r'"((?:[^"\\]|\\.)*)"=>(?:"((?:[^"\\]|\\.)*)"|(NULL))',
                                       text):
        unescape = re.compile(r"\\(.)")
        pairs[unescape.sub(r"\1", key)] = None if null else unescape.sub(r"\1", value)
    return json.dumps(pairs, separators=(",", ":"), ensure_ascii=False)


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


def type_default(convert: Converter | None, type_oid: int, type_modifier: int,
                 types: TypeCatalog | None = None) -> Any:
    """The value Debezium puts in a NOT NULL column that a change does not carry (the old
    row of a delete under the default replica identity): its type's zero."""
    info = (types or {}).get(type_oid)
    if info is not None and info.kind == "d":
        return type_default(convert, info.base, type_modifier, types)
    if type_oid in ARRAYS or (info is not None and info.element):
        return []
    zero = {BOOL: "f", INT2: "0", INT4: "0", INT8: "0", OID: "0", FLOAT4: "0",
            FLOAT8: "0", NUMERIC: "0", MONEY: "0", DATE: "1970-01-01", TIME: "00:00:00",
            TIMESTAMP: "1970-01-01 00:00:00", TIMESTAMPTZ: "1970-01-01 00:00:00+00",
            TIMETZ: "00:00:00+00", INTERVAL: "00:00:00", BYTEA: "\\x", BIT: "0"}
    if convert is None:
        return None
    if type_oid == TIMESTAMPTZ:
        return "1970-01-01T00:00:00Z"
    if type_oid in zero:
        return convert(zero[type_oid])
    return ""


_LITERAL = re.compile(r"^'((?:[^']|'')*)'::[\w .\"]+(?:\(\d+(?:,\d+)?\))?(?:\[\])?$")
_NUMBER = re.compile(r"^\(?(-?\d+(?:\.\d+)?)\)?(?:::[\w ]+)?$")


def default_literal(expression: str | None) -> str | None:
    """The text of a column default that is a constant (``'x'::text``, ``42``,
    ``(-1)``, ``true``), else None (``now()``, ``nextval(...)``)."""
    if expression is None:
        return None
    found = _LITERAL.match(expression)
    if found:  # Debezium reads a quoted default up to its first quote: 'ab''c' is ab
        return found.group(1).split("''")[0]
    found = _NUMBER.match(expression)
    if found:
        return found.group(1)
    if expression in ("true", "false"):
        return expression
    return None


def unavailable(type_oid: int, types: TypeCatalog | None = None) -> Any:
    """The placeholder of an unchanged TOASTed value as Debezium writes it for this type:
    the string, base64 of its bytes for bytea, and for arrays whatever Debezium's array
    conversion makes of the string (the list of its bytes for int, bigint and date
    elements; null for those it can't convert; a name-based UUID for uuid elements)."""
    info = (types or {}).get(type_oid)
    if info is not None and info.kind == "d":
        return unavailable(info.base, types)
    element = ARRAYS.get(type_oid) or (info.element if info is not None else 0)
    if element:
        base = (types or {}).get(element)
        element = base.base if base is not None and base.kind == "d" else element
        if element in (INT4, INT8, DATE):
            return list(UNAVAILABLE.encode())
        if element in (BOOL, INT2, FLOAT4, FLOAT8, NUMERIC, TIMESTAMP, TIMESTAMPTZ):
            return None
        if element == UUID:  # java.util.UUID.nameUUIDFromBytes of the placeholder
            return ["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]
        return [unavailable(element, types)]
    if type_oid == BYTEA:
        return base64.b64encode(UNAVAILABLE.encode()).decode()
    if info is not None and info.name == "hstore":
        return json.dumps({UNAVAILABLE: UNAVAILABLE}, separators=(",", ":"))
    return UNAVAILABLE
