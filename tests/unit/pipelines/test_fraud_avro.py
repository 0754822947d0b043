"""The fraud generator's Avro encoding: transactions round-trip through Confluent's wire
format; the injected malformed records stay exactly the bytes they were."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from headrace.pipelines.fraud.avro import TRANSACTION_SCHEMA, TransactionEncoder
from headrace.pipelines.fraud.config import FraudConfig
from headrace.pipelines.fraud.generator import FraudGenerator

WRITER = fastavro.parse_schema(json.loads(TRANSACTION_SCHEMA))


def _decode(value: bytes) -> dict[str, object]:
    record: dict[str, object] = fastavro.schemaless_reader(io.BytesIO(value[5:]), WRITER, None)
    return record


@pytest.mark.parametrize("schema_id", [1, 2**31 - 1])
def test_generated_stream_round_trips(schema_id: int) -> None:
    encoder = TransactionEncoder(schema_id)
    events = list(FraudGenerator(FraudConfig(seed=3, rate=200, duration_s=5,
                                             malformed_share=0.2)).stream(0))
    assert any(e.kind == "malformed" for e in events)
    for event in (e for e in events if e.kind != "profile"):  # transactions only
        encoded = encoder.encode(event.value)
        if encoded == event.value:  # passed through: only malformed records may
            assert event.kind == "malformed"
            continue
        assert encoded[:5] == b"\x00" + schema_id.to_bytes(4, "big")
        original = json.loads(event.value)
        assert {k: v for k, v in _decode(encoded).items() if v is not None} == original


def test_what_avro_cannot_carry_passes_through() -> None:
    encoder = TransactionEncoder(7)
    for value in (b"{truncated", b"\xff\x00garbage", b"[1, 2]",
                  json.dumps({"txn_id": "t", "amount": "abc"}).encode()):
        assert encoder.encode(value) == value
