"""Avro schemas: parsed by Apache Avro's own Python library, judged by its checker.

Compatibility is Avro's schema resolution (``avro.compatibility``, the port of the Java
``SchemaCompatibility`` that Confluent's registry uses): a reader can read a writer's data
when every reader field either exists in the writer (with a promotable type: int to
long/float/double, long to float/double, float to double, string and bytes both ways) or
has a default; enums keep the writer's symbols unless the reader has a default symbol;
named types match by name or alias; unions branch by branch. Defaults are validated at
parse time as Confluent does (a union's default must fit its first branch).
References are named types defined in other subjects, parsed first into the same names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

import avro.errors
import avro.name
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from headrace.registry.errors import InvalidSchema
from headrace.registry.formats.references import ResolvedReference, dependencies_first

_INTS = ("int", "long")
_FLOATS = ("float", "double")


@dataclass(frozen=True)
class AvroSchema:
    """A parsed Avro schema (``parsed`` is Avro's object; ``text`` as registered)."""

    text: str
    parsed: Any = field(compare=False)
    schema_type: str = "AVRO"

    def canonical(self, normalize: bool) -> str:
        shape = json.loads(str(self.parsed))
        return json.dumps(shape, sort_keys=normalize, separators=(",", ":"))

    def render(self, fmt: str | None) -> str:
        return self.text

    def evolution_errors(self, previous: object) -> list[str]:
        return []

    def compatibility_errors(self, writer: object) -> list[str]:
        assert isinstance(writer, AvroSchema)
        checker: Any = ReaderWriterCompatibilityChecker  # avro's checker has no annotations
        result = checker().get_compatibility(self.parsed, writer.parsed)
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        kinds = ", ".join(sorted(str(k.name) for k in result.incompatibilities))
        where = ", ".join(sorted(str(loc) for loc in result.locations))
        what = "; ".join(sorted(str(m) for m in result.messages))
        return [f"{kinds} at {where}: {what}"]


def parse(text: str, references: tuple[ResolvedReference, ...]) -> AvroSchema:
    names = avro.name.Names(validate_names=True)
    for ref in dependencies_first(references):
        _parse_into(ref.schema, names, f"reference {ref.name!r}")
    parsed = _parse_into(text, names, "schema")
    return AvroSchema(text=text, parsed=parsed)


def _parse_into(text: str, names: avro.name.Names, what: str) -> Any:
    try:
        shape = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidSchema(f"Invalid Avro {what}: not JSON: {e}") from e
    try:
        parsed = avro.schema.make_avsc_object(shape, names, validate_names=True)
    except (avro.errors.AvroException, TypeError, ValueError, KeyError, AttributeError) as e:
        raise InvalidSchema(f"Invalid Avro {what}: {e}") from e
    _check_defaults(parsed, set())
    return parsed


def _check_defaults(schema: Any, seen: set[int]) -> None:
    if id(schema) in seen:
        return
    seen.add(id(schema))
    kind = schema.type
    if kind in ("record", "error"):
        for f in schema.fields:
            if f.has_default and not _fits(f.type, f.default):
                raise InvalidSchema(f"Invalid default for field {f.name!r} of "
                                    f"{schema.fullname}: {f.default!r} is not a {_type_name(f.type)}")
            _check_defaults(f.type, seen)
    elif kind == "array":
        _check_defaults(schema.items, seen)
    elif kind == "map":
        _check_defaults(schema.values, seen)
    elif kind == "union":
        for branch in schema.schemas:
            _check_defaults(branch, seen)


def _type_name(schema: Any) -> str:
    if schema.type == "union":
        return str(_type_name(schema.schemas[0]))
    return str(getattr(schema, "fullname", None) or schema.type)


def _fits(schema: Any, value: object) -> bool:
    """Whether a JSON default fits an Avro type (Avro spec: a union's first branch)."""
    kind = schema.type
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in _INTS:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in _FLOATS:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind in ("bytes", "string"):
        return isinstance(value, str)
    if kind == "fixed":
        return isinstance(value, str) and len(value) == schema.size
    if kind == "enum":
        return isinstance(value, str) and value in schema.symbols
    if kind == "array":
        return isinstance(value, list) and all(_fits(schema.items, v) for v in value)
    if kind == "map":
        return isinstance(value, dict) and all(_fits(schema.values, v) for v in value.values())
    if kind == "union":
        return _fits(schema.schemas[0], value)
    if kind in ("record", "error"):
        if not isinstance(value, dict):
            return False
        record = cast(dict[str, object], value)
        return all(_fits(f.type, record[f.name]) if f.name in record else f.has_default
                   for f in schema.fields)
    return True
