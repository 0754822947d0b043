"""Schema formats: Avro, JSON Schema, Protobuf behind one interface.

``parse(schema_type, text, references)`` validates a schema (with the schemas it references,
already resolved to their texts) and returns a ``ParsedSchema``: its identity key
(``canonical``), the renderings the REST API serves, and ``compatibility_errors(writer)``,
the reasons data written with ``writer`` cannot be read with this schema (empty when it
can). The registry's compatibility levels are built from that one reader/writer check.
Parsing is pure (no I/O except Protobuf's text compiler, ``protoc``, in a subprocess) and
cached by content.
"""

from __future__ import annotations

import functools
from typing import Protocol

from headrace.registry.errors import InvalidSchema
from headrace.registry.formats.references import ResolvedReference

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


class ParsedSchema(Protocol):
    """A validated schema. Immutable; safe to share between threads."""

    @property
    def schema_type(self) -> str:
        """AVRO, JSON or PROTOBUF."""
        ...

    def canonical(self, normalize: bool) -> str:
        """The identity key: two registrations with equal keys get the same id. With
        ``normalize`` the key ignores more (attribute order, equivalent spellings)."""
        ...

    def render(self, fmt: str | None) -> str:
        """The schema text served for ``?format=fmt`` (None: as registered)."""
        ...

    def compatibility_errors(self, writer: ParsedSchema) -> list[str]:
        """Why data written with ``writer`` can't be read with this schema; [] if it can."""
        ...

    def evolution_errors(self, previous: ParsedSchema) -> list[str]:
        """Why this schema may not follow ``previous`` whichever way data flows (rules that
        depend on which schema is older, e.g. reusing a number ``previous`` reserved)."""
        ...


def parse(schema_type: str, text: str,
          references: tuple[ResolvedReference, ...] = ()) -> ParsedSchema:
    """Validate ``text`` as ``schema_type`` with its resolved references. Raises
    ``InvalidSchema`` (Confluent's 42201) for anything that does not parse or resolve."""
    if schema_type not in SCHEMA_TYPES:
        raise InvalidSchema(f"Unknown schema type {schema_type!r}; "
                            f"one of {', '.join(SCHEMA_TYPES)}")
    for ref in references:
        if ref.schema_type != schema_type:
            raise InvalidSchema(f"Reference {ref.name!r} is a {ref.schema_type} schema, "
                                f"not {schema_type}")
    return _parse_cached(schema_type, text, references)


@functools.lru_cache(maxsize=2048)
def _parse_cached(schema_type: str, text: str,
                  references: tuple[ResolvedReference, ...]) -> ParsedSchema:
    if schema_type == "AVRO":
        from headrace.registry.formats import avro_format
        return avro_format.parse(text, references)
    if schema_type == "JSON":
        from headrace.registry.formats import json_format
        return json_format.parse(text, references)
    from headrace.registry.formats import protobuf_format
    return protobuf_format.parse(text, references)


__all__ = ["SCHEMA_TYPES", "ParsedSchema", "ResolvedReference", "parse"]
