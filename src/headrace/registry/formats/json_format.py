"""JSON Schema: validated by the ``jsonschema`` library, judged by rules written here.

A reader schema can read a writer's data when it accepts every document the writer
accepts. No library decides that, so ``_Judge`` compares the two schemas keyword by
keyword, as Confluent's registry does: types may widen (integer to number) but not
change or narrow; ``required`` may shrink, not grow; enums may gain values, not lose them;
bounds (minimum, maxLength, minItems, ...) may relax, not tighten; a ``pattern``, ``not``
or ``const`` may not appear or change. Properties follow the content model: a property
added where the writer was open (``additionalProperties`` absent or true) is incompatible,
because old data may carry that name with any value; one added where the writer was closed
is fine; one removed is fine where the reader stays open and incompatible where the reader
is closed. ``$ref`` (local ``#/definitions/..`` and other subjects' schemas by reference
name) are followed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema

from headrace.registry.errors import InvalidSchema
from headrace.registry.formats.references import ResolvedReference, dependencies_first

_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


@dataclass(frozen=True)
class JsonSchema:
    """A parsed JSON Schema (``document`` is the JSON value; ``text`` as registered)."""

    text: str
    document: Any = field(compare=False)
    resolver: Any = field(compare=False)
    schema_type: str = "JSON"

    def canonical(self, normalize: bool) -> str:
        return json.dumps(self.document, sort_keys=True, separators=(",", ":"))

    def render(self, fmt: str | None) -> str:
        return self.text

    def evolution_errors(self, previous: object) -> list[str]:
        return []

    def compatibility_errors(self, writer: object) -> list[str]:
        assert isinstance(writer, JsonSchema)
        judge = _Judge(self.resolver, writer.resolver)
        judge.compare(self.document, writer.document, "#")
        return judge.errors


def parse(text: str, references: tuple[ResolvedReference, ...]) -> JsonSchema:
    document = _load(text, "schema")
    resources: list[tuple[str, referencing.Resource[Any]]] = []
    for ref in dependencies_first(references):
        resources.append((ref.name, _resource(_load(ref.schema, f"reference {ref.name!r}"))))
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(resources)
    root = _resource(document)
    validator_class = jsonschema.validators.validator_for(
        document, default=jsonschema.Draft7Validator)
    try:
        validator_class.check_schema(document)
    except jsonschema.SchemaError as e:
        raise InvalidSchema(f"Invalid JSON schema: {e.message}") from e
    resolver = registry.resolver_with_root(root)
    for target in _refs(document):
        try:
            resolver.lookup(target)
        except referencing.exceptions.Unresolvable as e:
            raise InvalidSchema(f"Invalid JSON schema: $ref {target!r} does not resolve") from e
    return JsonSchema(text=text, document=document, resolver=resolver)


def _load(text: str, what: str) -> Any:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidSchema(f"Invalid JSON {what}: not JSON: {e}") from e
    if not isinstance(document, dict | bool):
        raise InvalidSchema(f"Invalid JSON {what}: a schema is an object or a boolean")
    return document


def _resource(document: Any) -> referencing.Resource[Any]:
    return referencing.Resource.from_contents(
        document, default_specification=referencing.jsonschema.DRAFT7)


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.append(ref)
        for key, value in node.items():
            if key not in ("enum", "const", "default", "examples"):
                found.extend(_refs(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_refs(value))
    return found


def _types(schema: dict[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if kind is None:
        return None
    return {kind} if isinstance(kind, str) else set(kind)


class _Judge:
    """One reader/writer comparison; ``errors`` collects every incompatibility found."""

    def __init__(self, reader_resolver: Any, writer_resolver: Any) -> None:
        self.resolvers = (reader_resolver, writer_resolver)
        self.errors: list[str] = []
        self._active: set[tuple[int, int]] = set()

    def _deref(self, schema: Any, side: int) -> Any:
        for _ in range(32):
            if isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
                schema = self.resolvers[side].lookup(schema["$ref"]).contents
            else:
                break
        return schema

    def _fail(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def compare(self, reader: Any, writer: Any, path: str) -> None:
        reader, writer = self._deref(reader, 0), self._deref(writer, 1)
        key = (id(reader), id(writer))
        if key in self._active:
            return
        self._active.add(key)
        try:
            self._compare(reader, writer, path)
        finally:
            self._active.discard(key)

    def _compare(self, reader: Any, writer: Any, path: str) -> None:
        if writer is False or reader is True or reader == {}:
            return
        if reader is False:
            self._fail(path, "the reader accepts nothing")
            return
        if writer is True:
            writer = {}
        self._types(reader, writer, path)
        self._values(reader, writer, path)
        self._bounds(reader, writer, path)
        self._object(reader, writer, path)
        self._array(reader, writer, path)
        self._combinators(reader, writer, path)

    def _types(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        accepted, written = _types(reader), _types(writer)
        if accepted is None:
            return
        if written is None:
            self._fail(path, f"type narrowed to {sorted(accepted)} from any type")
            return
        for kind in sorted(written):
            if kind not in accepted and not (kind == "integer" and "number" in accepted):
                self._fail(path, f"type changed: {kind} is no longer accepted "
                                 f"(reader accepts {sorted(accepted)})")

    def _values(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        if "enum" in reader:
            if "enum" not in writer:
                self._fail(path, "enum added")
            else:
                lost = [v for v in writer["enum"] if v not in reader["enum"]]
                if lost:
                    self._fail(path, f"enum values removed: {lost}")
        if "const" in reader and writer.get("const", object()) != reader["const"]:
            self._fail(path, "const added or changed")
        for keyword in ("pattern", "format", "not", "multipleOf", "dependencies",
                        "dependentRequired", "dependentSchemas", "propertyNames"):
            if keyword in reader and reader[keyword] != writer.get(keyword):
                self._fail(path, f"{keyword} added or changed")
        if reader.get("uniqueItems") is True and writer.get("uniqueItems") is not True:
            self._fail(path, "uniqueItems added")

    def _bounds(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        for keyword in _LOWER_BOUNDS:
            if keyword in reader and (keyword not in writer or reader[keyword] > writer[keyword]):
                self._fail(path, f"{keyword} added or increased")
        for keyword in _UPPER_BOUNDS:
            if keyword in reader and (keyword not in writer or reader[keyword] < writer[keyword]):
                self._fail(path, f"{keyword} added or decreased")

    def _object(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        added = set(reader.get("required", [])) - set(writer.get("required", []))
        if added:
            self._fail(path, f"required properties added: {sorted(added)}")
        r_props: dict[str, Any] = reader.get("properties", {})
        w_props: dict[str, Any] = writer.get("properties", {})
        r_extra = reader.get("additionalProperties", True)
        w_extra = writer.get("additionalProperties", True)
        for name, schema in r_props.items():
            where = f"{path}/properties/{name}"
            if name in w_props:
                self.compare(schema, w_props[name], where)
            elif w_extra is False:
                continue  # the writer never wrote this name
            elif w_extra is True:
                if self._deref(schema, 0) not in (True, {}):
                    self._fail(where, "property added to an open content model "
                                      "(old data may hold this name with any value)")
            else:
                self.compare(schema, w_extra, where)
        for name, schema in w_props.items():
            if name in r_props:
                continue
            where = f"{path}/properties/{name}"
            if r_extra is False:
                self._fail(where, "property removed from a closed content model")
            elif r_extra is not True:
                self.compare(r_extra, schema, where)
        if r_extra is False and w_extra is not False:
            self._fail(path, "additionalProperties closed (was open)")
        elif r_extra not in (True, False) and w_extra is not False:
            self.compare(r_extra, {} if w_extra is True else w_extra,
                         f"{path}/additionalProperties")

    def _array(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        r_items, w_items = reader.get("items"), writer.get("items")
        if isinstance(r_items, dict | bool) and not isinstance(r_items, list):
            self.compare(r_items, True if w_items is None else w_items, f"{path}/items")

    def _combinators(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        for keyword in ("allOf",):
            for i, branch in enumerate(reader.get(keyword, [])):
                self.compare(branch, _without(writer, "allOf"), f"{path}/{keyword}/{i}")
        for keyword in ("anyOf", "oneOf"):
            if keyword not in reader:
                continue
            branches: list[Any] = reader[keyword]
            written: list[Any] = writer.get(keyword) or [_without(writer, keyword)]
            for j, w_branch in enumerate(written):
                if not any(self._accepts(r, w_branch) for r in branches):
                    self._fail(f"{path}/{keyword}", f"no branch accepts what the writer's "
                                                    f"branch {j} accepts")

    def _accepts(self, reader: Any, writer: Any) -> bool:
        probe = _Judge(*self.resolvers)
        probe.compare(reader, writer, "#")
        return not probe.errors


def _without(schema: dict[str, Any], keyword: str) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != keyword}
