"""A reference resolved to the schema it names, with that schema's own references."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class ResolvedReference:
    """``name`` is how the referring schema names it: an Avro full name, a JSON ``$ref``
    URI, or a Protobuf import path."""

    name: str
    schema_type: str
    schema: str
    references: tuple[ResolvedReference, ...] = ()


def dependencies_first(refs: tuple[ResolvedReference, ...]) -> Iterator[ResolvedReference]:
    """Every reference, transitively, each once (by name), dependencies before dependents."""
    seen: set[str] = set()

    def walk(ref: ResolvedReference) -> Iterator[ResolvedReference]:
        if ref.name in seen:
            return
        seen.add(ref.name)
        for inner in ref.references:
            yield from walk(inner)
        yield ref

    for ref in refs:
        yield from walk(ref)
