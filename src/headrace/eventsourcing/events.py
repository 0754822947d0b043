"""Events: typed classes, their registry, upcasting and the envelope stored in the log.

An event is a frozen dataclass whose fields hold JSON values (str, int, float, bool, None,
lists and dicts of them). ``EventTypes`` names each class (the name stored in the log, so a
class may be renamed in code) and gives it a schema version. When an event's shape changes,
bump its ``schema`` and register an upcaster from the old version: stored events are never
rewritten; reading one applies the chain of upcasters ``n -> n+1 -> ... -> current``.

Each event is one Kafka record: key = aggregate id (UTF-8), timestamp = the time the store
recorded it (CreateTime, never decreasing within a partition), value = a JSON envelope::

    {"id": "acc-1", "aggregate": "Account", "version": 3, "type": "Deposited",
     "schema": 2, "command": "c-17", "time": 1764028800123, "data": {"amount": 500}}

The envelope carries everything, so any consumer (Spark's ``from_json``, kcat, a plain
Kafka client) reads an event without this library.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from headrace.eventsourcing.errors import EventTypeError

E = TypeVar("E")
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class StoredEvent:
    """One event as read from the log. ``data`` is the payload at the schema version it was
    written with (``schema``); ``recorded_at`` is milliseconds since the epoch;
    ``partition``/``offset`` locate the record (-1 before it is written)."""

    aggregate_id: str
    aggregate_type: str
    version: int
    type: str
    schema: int
    data: dict[str, Any]
    command_id: str
    recorded_at: int
    partition: int = -1
    offset: int = -1

    def envelope(self) -> bytes:
        """The record value."""
        return json.dumps({"id": self.aggregate_id, "aggregate": self.aggregate_type,
                           "version": self.version, "type": self.type, "schema": self.schema,
                           "command": self.command_id, "time": self.recorded_at,
                           "data": self.data}, separators=(",", ":")).encode()


def decode_envelope(value: bytes | None, partition: int, offset: int) -> StoredEvent:
    """Parse a record value written by the store; ``EventTypeError`` if it is not one."""
    try:
        doc = json.loads(value) if value is not None else None
        if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
            raise ValueError("not an event envelope")
        return StoredEvent(str(doc["id"]), str(doc["aggregate"]), int(doc["version"]),
                           str(doc["type"]), int(doc["schema"]), doc["data"],
                           str(doc["command"]), int(doc["time"]), partition, offset)
    except (ValueError, KeyError, TypeError) as e:
        raise EventTypeError(f"record at partition {partition} offset {offset} is not an "
                             f"event envelope: {e}") from e


@dataclass(frozen=True)
class _Registered:
    cls: type[Any]
    name: str
    schema: int


class EventTypes:
    """The event classes an application knows, by stored name, with their upcasters.

    Not thread-safe to mutate; register everything at import time, then share freely."""

    def __init__(self) -> None:
        self._by_name: dict[str, _Registered] = {}
        self._by_class: dict[type[Any], _Registered] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}

    def register(self, name: str | None = None, schema: int = 1) -> Callable[[type[E]], type[E]]:
        """Class decorator: register a dataclass as the event ``name`` (default: the class
        name) at schema version ``schema``."""

        def wrap(cls: type[E]) -> type[E]:
            stored = name or cls.__name__
            if not dataclasses.is_dataclass(cls):
                raise EventTypeError(f"event class {cls.__name__} must be a dataclass")
            if stored in self._by_name:
                raise EventTypeError(f"event type {stored!r} is registered twice")
            if schema < 1:
                raise EventTypeError(f"event type {stored!r}: schema must be >= 1")
            entry = _Registered(cls, stored, schema)
            self._by_name[stored] = entry
            self._by_class[cls] = entry
            return cls

        return wrap

    def upcaster(self, name: str, from_schema: int) -> Callable[[Upcaster], Upcaster]:
        """Decorator: ``fn(data) -> data`` turns a payload of ``name`` at ``from_schema``
        into one at ``from_schema + 1``. Must be pure (it runs on every read)."""

        def wrap(fn: Upcaster) -> Upcaster:
            if (name, from_schema) in self._upcasters:
                raise EventTypeError(f"two upcasters for {name!r} from schema {from_schema}")
            self._upcasters[(name, from_schema)] = fn
            return fn

        return wrap

    def encode(self, event: Any) -> tuple[str, int, dict[str, Any]]:
        """``(name, schema, payload)`` of an event instance."""
        entry = self._by_class.get(type(event))
        if entry is None:
            raise EventTypeError(f"{type(event).__name__} is not a registered event type")
        return entry.name, entry.schema, dataclasses.asdict(event)

    def decode(self, stored: StoredEvent) -> Any:
        """The event instance of a stored event, upcast to its class's current schema."""
        entry = self._by_name.get(stored.type)
        if entry is None:
            raise EventTypeError(f"unknown event type {stored.type!r} (aggregate "
                                 f"{stored.aggregate_id!r} version {stored.version})")
        data, schema = stored.data, stored.schema
        if schema > entry.schema:
            raise EventTypeError(f"{stored.type!r} schema {schema} is newer than this code's "
                                 f"{entry.schema}")
        while schema < entry.schema:
            up = self._upcasters.get((stored.type, schema))
            if up is None:
                raise EventTypeError(f"no upcaster for {stored.type!r} from schema {schema} "
                                     f"to {schema + 1}")
            data, schema = up(dict(data)), schema + 1
        try:
            return entry.cls(**data)
        except TypeError as e:
            raise EventTypeError(f"{stored.type!r} schema {schema} payload does not fit "
                                 f"{entry.cls.__name__}: {e}") from e
