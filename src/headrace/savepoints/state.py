"""What a stateful operator's stored value says about itself, and how a processor resumes.

Every headrace operator keeps one pickled value per bucket of keys (``headrace.streaming.
buckets``): ``(keys, timer, header)``. The header, compact JSON, names the operator, its
state schema version and the parameters its state depends on; a value of two items was
written before headers, by schema version 1. This module is the one place that format is
read, below both the operators and the savepoints that copy their state.
"""

from __future__ import annotations

import json
import pickle
import struct
from collections.abc import Callable, Sequence
from typing import Any

Migration = Callable[[Any, "int | None"], "tuple[Any, int | None]"]
"""One step of a state migration: a bucket's ``(keys, timer)`` in an operator's schema
version n to the same in version n + 1 (registered in ``migrations``)."""

LEGACY_VERSION = 1
"""The schema version of a value written before headers."""


def header(operator: str, version: int, params: dict[str, Any]) -> str:
    """The header of ``operator``'s values: compact JSON with sorted keys."""
    return json.dumps({"operator": operator, "version": version, "params": params},
                      sort_keys=True, separators=(",", ":"))


def decode(value: bytes) -> tuple[Any, int | None, dict[str, Any] | None]:
    """A stored value's keys, timer and header (None: written before headers)."""
    stored = pickle.loads(value)
    return stored[0], stored[1], json.loads(stored[2]) if len(stored) > 2 else None


JVM_V2 = -2
"""The first int (big-endian) of the real-time rule operator's stored value of schema
version 2 (``io.headrace.realtime.KeyState``); a version-1 value opens with a count >= 0."""


def jvm_header(value: bytes | None) -> dict[str, Any] | None:
    """The header of the real-time rule operator's stored value (Java's ``writeInt(-2)``,
    then ``writeUTF(header JSON)``); None for a value of schema version 1 (no header)."""
    if not value or len(value) < 6 or int.from_bytes(value[:4], "big", signed=True) != JVM_V2:
        return None
    size = int.from_bytes(value[4:6], "big")
    head: dict[str, Any] = json.loads(value[6:6 + size].decode())
    return head


def jvm_state(value: bytes) -> dict[str, Any]:
    """The real-time rule operator's stored value (schema version 2), readable: its recent
    events (time, id, fields and flags by name), when each rule last fired, its profile.
    A value of version 1 (no header, so no names) shows its size only."""
    head = jvm_header(value)
    if head is None:
        return {"schema_version": LEGACY_VERSION, "bytes": len(value)}
    params = head["params"]
    at = 6 + int.from_bytes(value[4:6], "big")

    def take(fmt: str) -> Any:
        nonlocal at
        (out,) = struct.unpack_from(fmt, value, at)
        at += struct.calcsize(fmt)
        return out

    def text() -> str:
        nonlocal at
        size = take(">H")
        at += size
        return value[at - size:at].decode("utf-8", "replace")

    events = []
    for _ in range(take(">i")):
        t, txn = take(">q"), text()
        fields = {f: take(">d") for f in params["fields"]}
        flags = {f: bool(take(">?")) for f in params["flags"]}
        events.append({"t": t, "id": txn, **fields, **flags})
    fired = {}
    for _ in range(take(">i")):
        rule = text()
        fired[rule] = take(">q")
    profile = None
    if take(">?"):
        time = take(">q")
        profile = {"time": time, "values": [take(">d") for _ in range(take(">i"))]}
    return {"recent": events, "fired": fired, "profile": profile}


def count_keys(operator: str, keys: Any) -> int:
    """How many keys one bucket's value holds, by the operator's layout."""
    if not keys:
        return 0
    if operator == "windowed.columnar":  # columns: k0..kn per (key, window) row
        columns = [v for c, v in keys.items() if c[0] == "k" and c[1:].isdigit()]
        return len(set(zip(*columns, strict=True))) if columns else 1
    if operator == "temporal_join" or "vk" in keys:
        return len(set(keys["vk"].tolist()) | set(keys["pk"].tolist()))
    return len(keys)


class Resume:
    """How a processor starts from a savepoint: the watermark the savepoint's query had
    reached (a floor under Spark's, which a new query builds up from nothing) and the
    migrations from the savepoint's schema version to the processor's, oldest first.
    Picklable: it travels to the Python workers with the processor."""

    def __init__(self, watermark_ms: int = 0, migrations: Sequence[Migration] = ()) -> None:
        self.watermark_ms = watermark_ms
        self.migrations = tuple(migrations)


def per_key(operator: str, keys: Any) -> list[tuple[Any, Any]]:
    """One bucket's value as (key, its state) pairs, by the operator's layout: what
    ``headrace savepoint inspect --operator`` shows."""
    if not keys:
        return []
    if operator == "windowed.columnar" or ("start" in keys and "emitted" in keys):
        names = sorted(c for c in keys if c[0] == "k" and c[1:].isdigit())
        rows: dict[Any, list[dict[str, Any]]] = {}
        for i in range(len(keys["start"])):
            key = tuple(keys[c][i] for c in names)
            rows.setdefault(key, []).append(
                {c: keys[c][i].item() if hasattr(keys[c][i], "item") else keys[c][i]
                 for c in keys if c not in names})
        return list(rows.items())
    if "vk" in keys:  # temporal_join's columns
        held: dict[Any, dict[str, Any]] = {}
        for k, t, row in zip(keys["vk"], keys["vt"], keys["vr"], strict=True):
            held.setdefault(k, {"versions": {}, "pending": []})["versions"][int(t)] = row
        for k, t, event in zip(keys["pk"], keys["pt"], keys["pe"], strict=True):
            held.setdefault(k, {"versions": {}, "pending": []})["pending"].append((int(t), event))
        return list(held.items())
    return list(keys.items())
