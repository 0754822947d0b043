"""pgoutput decoding against messages encoded here from PostgreSQL's protocol description
(Hypothesis round trips), and Debezium's value mappings."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headrace.cdc import pgoutput
from headrace.cdc.errors import DecodeError
from headrace.cdc.values import converter, parse_array

TEXTS = st.one_of(st.none(), st.just(pgoutput.UNCHANGED_TOAST), st.text(max_size=20))


def _tuple(values: tuple[pgoutput.Value, ...]) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is pgoutput.UNCHANGED_TOAST:
            out += b"u"
        else:
            assert isinstance(v, str)
            data = v.encode()
            out += b"t" + struct.pack(">i", len(data)) + data
    return out


@given(st.integers(0, 2**63 - 1), st.integers(0, 2**40), st.integers(0, 2**32 - 1))
def test_begin(lsn: int, ts: int, xid: int) -> None:
    assert pgoutput.decode(b"B" + struct.pack(">qqI", lsn, ts, xid)) == \
        pgoutput.Begin(lsn, ts + pgoutput.PG_EPOCH_US, xid)


@given(st.integers(1, 2**32 - 1), st.lists(TEXTS, max_size=8).map(tuple),
       st.lists(TEXTS, max_size=8).map(tuple), st.sampled_from([b"", b"K", b"O"]))
def test_update_and_delete(oid: int, old: tuple[pgoutput.Value, ...],
                           new: tuple[pgoutput.Value, ...], marker: bytes) -> None:
    head = b"U" + struct.pack(">I", oid)
    body = (marker + _tuple(old) if marker else b"") + b"N" + _tuple(new)
    decoded = pgoutput.decode(head + body)
    assert decoded == pgoutput.Update(oid, old if marker else None, marker == b"K", new)
    if marker:
        assert pgoutput.decode(b"D" + struct.pack(">I", oid) + marker + _tuple(old)) == \
            pgoutput.Delete(oid, old, marker == b"K")


def test_relation() -> None:
    payload = (b"R" + struct.pack(">I", 16384) + b"public\0users\0" + b"d" +
               struct.pack(">h", 2) + b"\x01id\0" + struct.pack(">Ii", 23, -1) +
               b"\x00name\0" + struct.pack(">Ii", 25, -1))
    assert pgoutput.decode(payload) == pgoutput.Relation(
        16384, "public", "users", "d", (pgoutput.Column("id", 23, -1, True),
                                         pgoutput.Column("name", 25, -1, False)))


@given(st.binary(max_size=64))
def test_garbage_is_a_decode_error_never_a_crash(payload: bytes) -> None:
    with contextlib.suppress(DecodeError):
        pgoutput.decode(payload)


@given(st.integers(0, 2**64 - 1))
def test_lsn_text_round_trip(lsn: int) -> None:
    assert pgoutput.parse_lsn(pgoutput.lsn_text(lsn)) == lsn


@pytest.mark.parametrize("oid, modifier, text, expected", [
    (16, -1, "t", True), (20, -1, "-9007199254740993", -9007199254740993),
    (1700, 655366, "10.50", "BBo="), (1700, 655366, "-1.00", "nA=="),
    (1700, -1, "12.5", {"scale": 1, "value": "fQ=="}),
    (1700, -1, "1.25", {"scale": 2, "value": "fQ=="}),
    (1700, -1, "12.50", {"scale": 1, "value": "fQ=="}), (1700, -1, "NaN", None),
    (1700, -1, "Infinity", None), (1700, 655366, "NaN", None),
    (1700, -1, "123456789012345678901234567890.123456789",
     {"scale": 9, "value": "XODppWAV/sWq36MorjmBFQ=="}), (790, -1, "-$1,234.50", "/h3G"),
    (1082, -1, "1970-01-02", 1), (1083, -1, "00:00:01.5", 1_500_000),
    (1114, 3, "1970-01-01 00:00:01.234", 1234), (1114, -1, "1970-01-01 00:00:01.234567", 1234567),
    (1184, -1, "2024-01-02 03:04:05+05:30", "2024-01-01T21:34:05.000000Z"),
    (1184, -1, "2024-01-02 03:04:05.120000-02", "2024-01-02T05:04:05.120000Z"),
    (1184, 0, "2024-01-02 03:04:05+00", "2024-01-02T03:04:05Z"), (16, -1, "true", True),
    (17, -1, "\\x00ff", "AP8="), (2950, -1, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                                  "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    (3802, -1, '{"a": [1, 2]}', '{"a": [1, 2]}'), (1007, -1, "{1,NULL,3}", [1, None, 3]),
    (701, -1, "Infinity", "Infinity"),
])
def test_debezium_value_mapping(oid: int, modifier: int, text: str, expected: object) -> None:
    assert converter(oid, modifier)(text) == expected


def test_array_literals() -> None:
    assert parse_array('{"a,b","c\\"d",NULL,e}') == ["a,b", 'c"d', None, "e"]
    assert parse_array("{}") == []
