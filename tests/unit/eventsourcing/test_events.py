"""Event types, upcasting and the stored envelope (no broker)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headrace.eventsourcing import EventTypeError, EventTypes, StoredEvent
from headrace.eventsourcing.events import decode_envelope

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
payloads = st.dictionaries(st.text(max_size=10), json_scalars, max_size=5)


@given(st.text(min_size=1, max_size=30), st.text(max_size=10), st.integers(1, 2**40),
       st.text(min_size=1, max_size=20), st.integers(1, 50), payloads, st.text(max_size=20),
       st.integers(0, 2**45), st.integers(0, 100), st.integers(0, 2**40))
def test_envelope_round_trips(aggregate_id: str, aggregate_type: str, version: int, name: str,
                              schema: int, data: dict[str, Any], command: str, time_ms: int,
                              partition: int, offset: int) -> None:
    ev = StoredEvent(aggregate_id, aggregate_type, version, name, schema, data, command,
                     time_ms, partition, offset)
    assert decode_envelope(ev.envelope(), partition, offset) == ev


@given(st.binary(max_size=200) | st.none())
def test_garbage_is_a_clear_error(value: bytes | None) -> None:
    try:
        decode_envelope(value, 3, 9)
    except EventTypeError as e:
        assert "partition 3 offset 9" in str(e)


def make_types() -> tuple[EventTypes, type[Any]]:
    types = EventTypes()

    @types.register("Renamed", schema=3)
    @dataclass(frozen=True)
    class Moved:
        to: str
        floor: int
        note: str

    @types.upcaster("Renamed", 1)
    def v1(d: dict[str, Any]) -> dict[str, Any]:  # v1 had "target"
        return {"to": d.pop("target"), "floor": 0}

    @types.upcaster("Renamed", 2)
    def v2(d: dict[str, Any]) -> dict[str, Any]:  # v2 had no note
        return {**d, "note": "-"}

    return types, Moved


def stored(name: str, schema: int, data: dict[str, Any]) -> StoredEvent:
    return StoredEvent("a", "T", 1, name, schema, data, "c", 0)


def test_upcasters_chain_to_the_current_schema() -> None:
    types, moved = make_types()
    assert types.decode(stored("Renamed", 1, {"target": "x"})) == moved("x", 0, "-")
    assert types.decode(stored("Renamed", 2, {"to": "y", "floor": 2})) == moved("y", 2, "-")
    assert types.decode(stored("Renamed", 3, {"to": "z", "floor": 1, "note": "n"})) == \
        moved("z", 1, "n")
    assert types.encode(moved("z", 1, "n")) == ("Renamed", 3, {"to": "z", "floor": 1, "note": "n"})


def test_decoding_errors_say_what_is_wrong() -> None:
    types, _ = make_types()
    with pytest.raises(EventTypeError, match="unknown event type 'Nope'"):
        types.decode(stored("Nope", 1, {}))
    with pytest.raises(EventTypeError, match="newer than this code"):
        types.decode(stored("Renamed", 4, {}))
    with pytest.raises(EventTypeError, match="does not fit"):
        types.decode(stored("Renamed", 3, {"to": "z"}))
    with pytest.raises(EventTypeError, match="not a registered event type"):
        types.encode(object())


def test_registration_mistakes_are_refused() -> None:
    types, moved = make_types()
    with pytest.raises(EventTypeError, match="registered twice"):
        types.register("Renamed")(moved)
    with pytest.raises(EventTypeError, match="must be a dataclass"):
        types.register("X")(int)
    with pytest.raises(EventTypeError, match="two upcasters"):
        types.upcaster("Renamed", 1)(lambda d: d)
    broken = EventTypes()

    @broken.register("Gap", schema=3)
    @dataclass(frozen=True)
    class Gap:
        a: int

    with pytest.raises(EventTypeError, match="no upcaster for 'Gap' from schema 1"):
        broken.decode(stored("Gap", 1, {"a": 1}))
