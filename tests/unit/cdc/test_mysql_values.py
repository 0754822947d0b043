"""Debezium's MySQL value mappings at their edges, the ENUM/SET definition parser and the
DSN (its password never shown), without a server."""

from __future__ import annotations

import base64
import datetime as dt
import struct
from decimal import Context, Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from headrace.cdc.errors import CdcConfigError
from headrace.cdc.mysql import Dsn
from headrace.cdc.mysql_values import ColumnType, _quoted_list, convert, from_catalog


@given(st.integers(min_value=-(10**64) + 1, max_value=10**64 - 1), st.integers(0, 30))
def test_decimal_is_the_unscaled_twos_complement_of_java_s_biginteger(unscaled: int,
                                                                      scale: int) -> None:
    value = Decimal(unscaled).scaleb(-scale, Context(prec=100))  # exact, as the readers give
    raw = base64.b64decode(convert(ColumnType("decimal", scale=scale), value))
    assert int.from_bytes(raw, "big", signed=True) == unscaled
    # BigInteger.toByteArray: the fewest bytes that hold the sign bit
    assert len(raw) == 1 or int.from_bytes(raw[1:], "big", signed=True) != unscaled


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
@example(999999986991104.0)
def test_float_is_the_shortest_decimal_of_its_float32(value: float) -> None:
    out = convert(ColumnType("float"), value)
    assert struct.pack("<f", out) == struct.pack("<f", value)
    # no more significant digits than the float32 read as a double (repr's length would
    # count a power of ten's zeros: 999999986991104.0 -> 1e15 is shorter, not longer)
    assert _significant_digits(out) <= _significant_digits(value)


def _significant_digits(value: float) -> int:
    return len(Decimal(repr(value)).normalize().as_tuple().digits)


@pytest.mark.parametrize(("column", "value", "expected"), [
    (ColumnType("int", unsigned=True), 18446744073709551615, -1),
    (ColumnType("int", unsigned=True), 9223372036854775807, 9223372036854775807),
    (ColumnType("bit", bits=1), b"\x01", True),
    (ColumnType("bit", bits=12), "000000000101", "BQA="),
    (ColumnType("bit", bits=12), b"\x00\x05", "BQA="),
    (ColumnType("time"), -dt.timedelta(hours=838, minutes=59, seconds=59), -3020399000000),
    (ColumnType("datetime", fsp=3), dt.datetime(1969, 12, 31, 23, 59, 59, 500000), -500),
    (ColumnType("datetime", fsp=6), dt.datetime(1970, 1, 1, 0, 0, 0, 1), 1),
    (ColumnType("timestamp", fsp=3), dt.datetime(2024, 1, 2, 3, 4, 5, 250000),
     "2024-01-02T03:04:05.25Z"),
    (ColumnType("timestamp", fsp=3, streamed=True), dt.datetime(2024, 1, 2, 3, 4, 5, 250000),
     "2024-01-02T03:04:05.250Z"),
    (ColumnType("timestamp", fsp=0, streamed=True), dt.datetime(2024, 1, 2, 3, 4, 5),
     "2024-01-02T03:04:05Z"),
    (ColumnType("date"), dt.date(1000, 1, 1), -354285),
    (ColumnType("bytes", length=3), b"\x01", "AQAA"),
    (ColumnType("set", values=("a", "b", "c")), "c,a", "a,c"),
    (ColumnType("set", values=("a", "b", "c")), {"c", "b"}, "b,c"),
    (ColumnType("set", values=("a", "b")), "", ""),
    (ColumnType("json"), {b"k": [1, b"x"]}, '{"k":[1,"x"]}'),
    (ColumnType("string"), None, None),
])
def test_values_as_debezium_writes_them(column: ColumnType, value: object,
                                        expected: object) -> None:
    assert convert(column, value) == expected


def test_enum_and_set_definitions_keep_quotes_and_commas() -> None:
    assert _quoted_list("'a','b''c','d,e',''") == ("a", "b'c", "d,e", "")
    assert from_catalog("enum", "enum('x','y')", None, None, None).values == ("x", "y")
    with pytest.raises(CdcConfigError, match="geometry"):
        from_catalog("geometry", "geometry", None, None, None)


def test_the_dsn_and_its_redaction() -> None:
    dsn = Dsn.parse("mysql://cdc:p%40ss@db.example:3307/shop")
    assert (dsn.host, dsn.port, dsn.user, dsn.password, dsn.database) == \
        ("db.example", 3307, "cdc", "p@ss", "shop")
    assert dsn.redacted() == "mysql://cdc:***@db.example:3307/shop"
    assert Dsn.parse("mariadb://root@h/x").port == 3306
    for bad in ("host=h dbname=x", "mysql://h", "postgres://u@h/x"):
        with pytest.raises(CdcConfigError, match="--dsn must look like"):
            Dsn.parse(bad)
