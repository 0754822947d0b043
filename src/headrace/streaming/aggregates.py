"""Window aggregates as mergeable accumulators kept in Spark state.

An accumulator is a small JSON-able list, so window state survives restarts and session
windows can merge. ``approx_distinct`` is a K-minimum-values sketch (k = 256): exact up
to 256 distinct values, about 6 % standard error beyond, and mergeable.
"""

from __future__ import annotations

import hashlib
import heapq
from dataclasses import dataclass
from typing import Any

from headrace.streaming.errors import SpecError

KMV_K = 256
_HASH_SPACE = float(2**64)

KINDS = ("count", "sum", "avg", "min", "max", "approx_distinct")


@dataclass(frozen=True)
class Agg:
    """One output column: ``kind`` over ``column`` (None for count of events)."""

    name: str
    kind: str
    column: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecError(f"aggregate {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind != "count" and self.column is None:
            raise SpecError(f"aggregate {self.kind} needs a column")

    @property
    def spark_type(self) -> str:
        return "long" if self.kind in ("count", "approx_distinct") else "double"


def count(name: str = "count") -> Agg:
    return Agg(name, "count")


def sum_of(column: str, name: str | None = None) -> Agg:
    return Agg(name or f"sum_{column}", "sum", column)


def avg_of(column: str, name: str | None = None) -> Agg:
    return Agg(name or f"avg_{column}", "avg", column)


def min_of(column: str, name: str | None = None) -> Agg:
    return Agg(name or f"min_{column}", "min", column)


def max_of(column: str, name: str | None = None) -> Agg:
    return Agg(name or f"max_{column}", "max", column)


def approx_distinct(column: str, name: str | None = None) -> Agg:
    return Agg(name or f"distinct_{column}", "approx_distinct", column)


def _hash(value: Any) -> int:
    return int.from_bytes(hashlib.blake2b(repr(value).encode(), digest_size=8).digest(), "big")


def empty(aggs: tuple[Agg, ...]) -> list[Any]:
    """A fresh accumulator: one slot per aggregate."""
    out: list[Any] = []
    for a in aggs:
        if a.kind == "count":
            out.append(0)
        elif a.kind in ("sum", "avg"):
            out.append([0.0, 0])
        elif a.kind in ("min", "max"):
            out.append(None)
        else:
            out.append([])
    return out


def add(aggs: tuple[Agg, ...], acc: list[Any], row: Any) -> None:
    """Fold one event (a Row or mapping) into ``acc`` in place. Nulls are skipped, as SQL does."""
    for i, a in enumerate(aggs):
        if a.kind == "count":
            acc[i] += 1
            continue
        value = row[a.column]
        if value is None:
            continue
        if a.kind in ("sum", "avg"):
            acc[i][0] += float(value)
            acc[i][1] += 1
        elif a.kind == "min":
            acc[i] = value if acc[i] is None else min(acc[i], value)
        elif a.kind == "max":
            acc[i] = value if acc[i] is None else max(acc[i], value)
        else:
            _kmv_add(acc[i], _hash(value))


def _kmv_add(sketch: list[int], h: int) -> None:
    if h in sketch:
        return
    if len(sketch) < KMV_K:
        sketch.append(h)
        sketch.sort()
    elif h < sketch[-1]:
        sketch[-1] = h
        sketch.sort()


def merge(aggs: tuple[Agg, ...], a: list[Any], b: list[Any]) -> list[Any]:
    """The accumulator of the union of two windows (session merges)."""
    out: list[Any] = []
    for i, agg in enumerate(aggs):
        x, y = a[i], b[i]
        if agg.kind == "count":
            out.append(x + y)
        elif agg.kind in ("sum", "avg"):
            out.append([x[0] + y[0], x[1] + y[1]])
        elif agg.kind in ("min", "max"):
            pick = min if agg.kind == "min" else max
            out.append(x if y is None else y if x is None else pick(x, y))
        else:
            out.append(heapq.nsmallest(KMV_K, set(x) | set(y)))
    return out


def result(aggs: tuple[Agg, ...], acc: list[Any]) -> dict[str, Any]:
    """Column name -> value of each aggregate (avg of nothing is null)."""
    out: dict[str, Any] = {}
    for i, a in enumerate(aggs):
        v = acc[i]
        if a.kind == "count":
            out[a.name] = v
        elif a.kind == "sum":
            out[a.name] = v[0] if v[1] else None
        elif a.kind == "avg":
            out[a.name] = v[0] / v[1] if v[1] else None
        elif a.kind in ("min", "max"):
            out[a.name] = None if v is None else float(v)
        else:
            out[a.name] = (len(v) if len(v) < KMV_K
                           else round((KMV_K - 1) / (v[-1] / _HASH_SPACE)))
    return out


def fold(aggs: tuple[Agg, ...], rows: list[Any]) -> dict[str, Any]:
    """Aggregate a list of events at once (the per-event sliding window's recomputation)."""
    acc = empty(aggs)
    for r in rows:
        add(aggs, acc, r)
    return result(aggs, acc)
