"""Compatibility verdicts, a table per schema type: each case is (old, new) with the
verdict of BACKWARD (new reads old data) and FORWARD (old reads new data) written by hand;
FULL is both. Every case runs through the REST API under every level, and the transitive
levels are checked against a three-version history where only the oldest conflicts."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from headrace.registry.client import RegistryClient, RegistryClientError

LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE", "NONE")


def rec(*fields: Any, name: str = "Rec") -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


def f(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, **extra}


def enum(*symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "Color", "symbols": list(symbols), **extra}


def obj(props: dict[str, Any], *, required: list[str] | None = None,
        additional: Any = None) -> str:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if additional is not None:
        schema["additionalProperties"] = additional
    return json.dumps(schema)


def proto(body: str, package: str = "p") -> str:
    return f'syntax = "proto3"; package {package}; {body}'


S, INT, N = {"type": "string"}, {"type": "integer"}, {"type": "number"}

# (case id, type, old, new, backward ok, forward ok)
CASES: list[tuple[str, str, str, str, bool, bool]] = [
    # Avro
    ("avro-add-field-with-default", "AVRO", rec(f("a", "int")),
     rec(f("a", "int"), f("b", "string", default="")), True, True),
    ("avro-add-field-without-default", "AVRO", rec(f("a", "int")),
     rec(f("a", "int"), f("b", "string")), False, True),
    ("avro-remove-field-with-default", "AVRO", rec(f("a", "int"), f("b", "int", default=0)),
     rec(f("a", "int")), True, True),
    ("avro-remove-field-without-default", "AVRO", rec(f("a", "int"), f("b", "int")),
     rec(f("a", "int")), True, False),
    ("avro-promote-int-to-long", "AVRO", rec(f("a", "int")), rec(f("a", "long")), True, False),
    ("avro-change-string-to-int", "AVRO", rec(f("a", "string")), rec(f("a", "int")),
     False, False),
    ("avro-string-to-bytes", "AVRO", rec(f("a", "string")), rec(f("a", "bytes")), True, True),
    ("avro-enum-add-symbol", "AVRO", rec(f("c", enum("RED", "GREEN"))),
     rec(f("c", enum("RED", "GREEN", "BLUE"))), True, False),
    ("avro-enum-add-symbol-reader-default", "AVRO",
     rec(f("c", enum("RED", "GREEN", default="RED"))),
     rec(f("c", enum("RED", "GREEN", "BLUE", default="RED"))), True, True),
    ("avro-enum-remove-symbol", "AVRO", rec(f("c", enum("RED", "GREEN", "BLUE"))),
     rec(f("c", enum("RED", "GREEN"))), False, True),
    ("avro-rename-record", "AVRO", rec(f("a", "int")), rec(f("a", "int"), name="Other"),
     False, False),
    ("avro-rename-field-with-alias", "AVRO", rec(f("a", "int")),
     rec(f("b", "int", aliases=["a"])), True, False),
    ("avro-widen-to-union", "AVRO", rec(f("a", "string")), rec(f("a", ["null", "string"],
                                                                  default=None)), True, False),
    # JSON Schema
    ("json-add-optional-property-closed-model", "JSON", obj({"a": S}, additional=False),
     obj({"a": S, "b": INT}, additional=False), True, False),
    ("json-add-property-open-model", "JSON", obj({"a": S}), obj({"a": S, "b": INT}),
     False, True),
    ("json-remove-property-open-model", "JSON", obj({"a": S, "b": INT}), obj({"a": S}),
     True, False),
    ("json-remove-property-closed-model", "JSON", obj({"a": S, "b": INT}, additional=False),
     obj({"a": S}, additional=False), False, True),
    ("json-add-required", "JSON", obj({"a": S, "b": INT}, additional=False),
     obj({"a": S, "b": INT}, required=["b"], additional=False), False, True),
    ("json-integer-to-number", "JSON", obj({"a": INT}), obj({"a": N}), True, False),
    ("json-string-to-integer", "JSON", obj({"a": S}), obj({"a": INT}), False, False),
    ("json-enum-extended", "JSON", obj({"a": {"enum": ["x", "y"]}}),
     obj({"a": {"enum": ["x", "y", "z"]}}), True, False),
    ("json-maxlength-reduced", "JSON", obj({"a": {"type": "string", "maxLength": 10}}),
     obj({"a": {"type": "string", "maxLength": 5}}), False, True),
    ("json-close-open-model", "JSON", obj({"a": S}), obj({"a": S}, additional=False),
     False, True),
    # Protobuf
    ("proto-add-field", "PROTOBUF", proto("message M { string a = 1; }"),
     proto("message M { string a = 1; int64 b = 2; }"), True, True),
    ("proto-remove-field", "PROTOBUF", proto("message M { string a = 1; int64 b = 2; }"),
     proto("message M { string a = 1; reserved 2; }"), True, True),
    ("proto-field-number-reused-other-type", "PROTOBUF",
     proto("message M { string a = 1; string email = 3; }"),
     proto("message M { string a = 1; int64 age = 3; }"), False, False),
    ("proto-reserved-number-reused", "PROTOBUF",
     proto("message M { string a = 1; reserved 3; }"),
     proto("message M { string a = 1; bytes x = 3; }"), False, False),
    ("proto-int32-to-int64", "PROTOBUF", proto("message M { int32 a = 1; }"),
     proto("message M { int64 a = 1; }"), True, True),
    ("proto-int32-to-sint32", "PROTOBUF", proto("message M { int32 a = 1; }"),
     proto("message M { sint32 a = 1; }"), False, False),
    ("proto-string-to-bytes", "PROTOBUF", proto("message M { string a = 1; }"),
     proto("message M { bytes a = 1; }"), True, True),
    ("proto-rename-field", "PROTOBUF", proto("message M { string a = 1; }"),
     proto("message M { string renamed = 1; }"), True, True),
    ("proto-remove-message", "PROTOBUF", proto("message M { string a = 1; } message N {}"),
     proto("message M { string a = 1; }"), False, True),
    ("proto-change-package", "PROTOBUF", proto("message M { string a = 1; }"),
     proto("message M { string a = 1; }", package="q"), False, False),
    ("proto-two-fields-into-new-oneof", "PROTOBUF",
     proto("message M { string a = 1; string b = 2; }"),
     proto("message M { oneof choice { string a = 1; string b = 2; } }"), False, False),
    ("proto-one-field-into-new-oneof", "PROTOBUF",
     proto("message M { string a = 1; string b = 2; }"),
     proto("message M { string a = 1; oneof choice { string b = 2; } }"), True, False),
    ("proto-singular-to-repeated-int", "PROTOBUF", proto("message M { int32 a = 1; }"),
     proto("message M { repeated int32 a = 1; }"), False, False),
    ("proto-message-type-changed", "PROTOBUF",
     proto("message A { string s = 1; } message B { string s = 1; } message M { A x = 1; }"),
     proto("message A { string s = 1; } message B { string s = 1; } message M { B x = 1; }"),
     False, False),
]


def expected(level: str, backward: bool, forward: bool) -> bool:
    if level == "NONE":
        return True
    if level.startswith("BACKWARD"):
        return backward
    if level.startswith("FORWARD"):
        return forward
    return backward and forward


def _fresh(rest: RegistryClient, level: str) -> str:
    subject = f"compat-{uuid.uuid4().hex[:12]}"
    rest.config(subject, level)
    return subject


@pytest.mark.slow
@pytest.mark.parametrize("case, schema_type, old, new, backward, forward", CASES,
                         ids=[c[0] for c in CASES])
def test_verdict_under_every_level(rest: RegistryClient, case: str, schema_type: str,
                                   old: str, new: str, backward: bool, forward: bool) -> None:
    for level in LEVELS:
        subject = _fresh(rest, level)
        rest.register(subject, old, schema_type)
        ok = expected(level, backward, forward)
        answer = rest.check(subject, new, schema_type, version="latest")
        assert answer["is_compatible"] is ok, (level, answer.get("messages"))
        if ok:
            rest.register(subject, new, schema_type)
            assert rest.versions(subject) == [1, 2]
        else:
            with pytest.raises(RegistryClientError) as e:
                rest.register(subject, new, schema_type)
            assert e.value.error_code == 409, (level, e.value.message)
            assert rest.versions(subject) == [1]


@pytest.mark.parametrize("level, refused", [
    ("BACKWARD", False), ("BACKWARD_TRANSITIVE", True), ("FORWARD", False),
    ("FORWARD_TRANSITIVE", True), ("FULL", False), ("FULL_TRANSITIVE", True), ("NONE", False)])
def test_transitive_levels_look_past_the_latest(rest: RegistryClient, level: str,
                                                refused: bool) -> None:
    """v1 has a:string; v2 dropped it (registered under NONE); v3 brings a back as an int.
    v3 is fine with v2 both ways and conflicts with v1 both ways."""
    subject = _fresh(rest, "NONE")
    rest.register(subject, rec(f("a", "string")))
    rest.register(subject, rec(f("b", "int", default=0)))
    rest.config(subject, level)
    v3 = rec(f("b", "int", default=0), f("a", "int", default=0))
    assert rest.check(subject, v3, version="latest")["is_compatible"] is True
    assert rest.check(subject, v3)["is_compatible"] is not refused
    if refused:
        with pytest.raises(RegistryClientError) as e:
            rest.register(subject, v3)
        assert e.value.error_code == 409
    else:
        assert rest.register(subject, v3)["version"] == 3
