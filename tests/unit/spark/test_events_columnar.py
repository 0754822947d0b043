"""The columnar JSON path of ``read_events`` against its row-by-row path: for any batch of
record values, good or bad, both give the same rows and the same dead letters; and a batch
of good values does take the columnar path (else it would test nothing)."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.spark.event_parser import EventParser
from headrace.spark.events import event_spec
from headrace.spark.reading import ARROW_SCHEMA

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "k", "type": "string", "nullable": False, "metadata": {}},
    {"name": "ts", "type": "long", "nullable": False, "metadata": {}},
    {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
    {"name": "n", "type": "short", "nullable": True, "metadata": {}},
    {"name": "ok", "type": "boolean", "nullable": True, "metadata": {}},
]})


def parser() -> EventParser:
    return EventParser(event_spec(SCHEMA, "ts", "dlq"))


def raw_batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "key": [f"k{i}".encode() for i in range(n)], "value": values,
        "topic": ["t"] * n, "partition": [1] * n, "offset": list(range(100, 100 + n)),
        "timestamp": [dt.datetime(2026, 1, 1, tzinfo=dt.UTC)] * n, "timestampType": [0] * n,
    }, schema=ARROW_SCHEMA)


good_docs = st.fixed_dictionaries(
    {"k": st.text(max_size=8), "ts": st.integers(-62135596800000, 253402300799999)},
    optional={"amount": st.none() | st.floats(allow_nan=False) | st.integers(-2**60, 2**60),
              "n": st.none() | st.integers(-2**15, 2**15 - 1),
              "ok": st.none() | st.booleans(),
              "extra": st.recursive(st.none() | st.integers() | st.text(max_size=4),
                                    lambda c: st.lists(c, max_size=3), max_leaves=4)})
good_values = good_docs.map(lambda d: json.dumps(d, ensure_ascii=False).encode())
# values either path must refuse, or that Arrow's reader frames unlike one document per record
odd_values = st.sampled_from([
    b"", b"   ", b"not json", b"[1, 2]", b"5", b'{"k": "a", "ts": 1}{"k": "b", "ts": 2}',
    b'{"k": "a",\n "ts": 1}', b'{"k": "a", "ts": 1}\r\n', b'\xef\xbb\xbf{"k": "a", "ts": 1}',
    b'{"k": "a", "ts": 1.0}', b'{"k": "a", "ts": true}', b'{"k": "a", "ts": "1"}',
    b'{"k": 1, "ts": 1}', b'{"ts": 1}', b'{"k": "a"}', b'{"k": "a", "ts": null}',
    b'{"k": "a", "ts": 1, "n": 40000}', b'{"k": "a", "ts": 1, "amount": NaN}',
    b'{"k": "a", "ts": 1, "amount": 1e400}', b'{"k": "a", "k": "b", "ts": 1}',
    b'{"k": "\\ud83d", "ts": 1}', b'{"k": "\xff", "ts": 1}', b'{"k": "a", "ts": 1, "ok": 1}',
    b'{"k": "a", "ts": 99999999999999999999}', b'{"k": "a", "ts": 253402300800000}',
    b'{"k": "a", "ts": 1, "amount": true}', b'{"k": "a", "ts": 1,}', None,
])


def rows(batch: pa.RecordBatch) -> str:
    """The rows, comparable (NaN as text)."""
    return repr(batch.to_pylist())


@settings(max_examples=300, deadline=None)
@given(st.lists(good_values | odd_values, min_size=1, max_size=12))
def test_columnar_equals_row_by_row(values: list[bytes | None]) -> None:
    raw = raw_batch(values)
    p = parser()
    expected = p._parse_rows(raw)
    got = p.parse(raw)
    assert rows(got[0]) == rows(expected[0])
    assert got[0].schema == expected[0].schema
    assert got[1] == expected[1]


@settings(max_examples=100, deadline=None)
@given(st.lists(good_values, min_size=1, max_size=20))
def test_good_batches_take_the_columnar_path(values: list[bytes | None]) -> None:
    p = parser()
    raw = raw_batch(values)
    assert p.columnar is not None
    fast = p._parse_columnar(raw, p.columnar)
    assert fast is not None
    assert rows(fast) == rows(p._parse_rows(raw)[0])


def test_schemas_outside_the_columnar_types_parse_row_by_row() -> None:
    nested = SCHEMA.replace('"boolean"', '{"type": "array", "elementType": "string", '
                                         '"containsNull": true}')
    assert EventParser(event_spec(nested, "ts", "dlq")).columnar is None
    assert EventParser(event_spec(SCHEMA, "ts", "dlq", envelope="debezium")).columnar is None
    iso = SCHEMA.replace('"name": "k", "type": "string"', '"name": "k", "type": "timestamp"')
    assert EventParser(event_spec(iso, "k", "dlq")).columnar is None
