"""Schema formats without a server: properties of the compatibility rules and identities
over generated schemas (the hand-written verdict table runs through the REST API in
tests/registry/test_compatibility.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.registry.errors import InvalidSchema
from headrace.registry.formats import parse

NAMES = st.text("abcdefghij", min_size=1, max_size=6)
PRIMITIVES = st.sampled_from(["int", "long", "float", "double", "string", "bytes", "boolean"])
DEFAULTS = {"int": 0, "long": 0, "float": 0.0, "double": 0.0, "string": "", "bytes": "",
            "boolean": False}


@st.composite
def avro_records(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    fields = []
    for name in names:
        kind = draw(PRIMITIVES)
        entry: dict[str, Any] = {"name": name, "type": kind}
        if draw(st.booleans()):
            entry["default"] = DEFAULTS[kind]
        fields.append(entry)
    return {"type": "record", "name": "R", "fields": fields}


@given(avro_records())
def test_avro_schema_reads_itself(schema: dict[str, Any]) -> None:
    parsed = parse("AVRO", json.dumps(schema))
    assert parsed.compatibility_errors(parsed) == []


@given(avro_records(), NAMES, PRIMITIVES, st.booleans())
def test_avro_added_field(schema: dict[str, Any], name: str, kind: str,
                          with_default: bool) -> None:
    """New field: backward compatible iff it has a default; always forward compatible."""
    if name in {f["name"] for f in schema["fields"]}:
        return
    field: dict[str, Any] = {"name": name, "type": kind}
    if with_default:
        field["default"] = DEFAULTS[kind]
    old = parse("AVRO", json.dumps(schema))
    new = parse("AVRO", json.dumps({**schema, "fields": [*schema["fields"], field]}))
    assert (new.compatibility_errors(old) == []) is with_default
    assert old.compatibility_errors(new) == []


@given(avro_records(), st.randoms())
def test_avro_identity_ignores_layout(schema: dict[str, Any], rnd: Any) -> None:
    """Whitespace and attribute order don't change a schema's id; field order does."""
    shuffled = {k: schema[k] for k in rnd.sample(list(schema), len(schema))}
    a = parse("AVRO", json.dumps(schema))
    b = parse("AVRO", json.dumps(shuffled, indent=3))
    assert a.canonical(False) == b.canonical(False)
    if len(schema["fields"]) > 1:
        reordered = {**schema, "fields": schema["fields"][::-1]}
        assert parse("AVRO", json.dumps(reordered)).canonical(False) != a.canonical(False)


@given(st.dictionaries(NAMES, st.sampled_from(["string", "integer", "number", "boolean"]),
                       max_size=5), st.booleans())
def test_json_schema_reads_itself(props: dict[str, str], closed: bool) -> None:
    schema = {"type": "object", "properties": {k: {"type": v} for k, v in props.items()},
              "additionalProperties": not closed}
    parsed = parse("JSON", json.dumps(schema))
    assert parsed.compatibility_errors(parsed) == []


@settings(max_examples=8, deadline=None)
@given(st.lists(st.sampled_from(["string", "int64", "bool", "bytes", "double"]), min_size=1,
                max_size=5))
def test_protobuf_text_and_descriptor_forms_share_an_identity(kinds: list[str]) -> None:
    body = " ".join(f"{k} f{i} = {i + 1};" for i, k in enumerate(kinds))
    text = parse("PROTOBUF", f'syntax = "proto3"; package t; message M {{ {body} }}')
    descriptor = parse("PROTOBUF", text.render("serialized"))
    assert descriptor.canonical(False) == text.canonical(False)
    assert descriptor.compatibility_errors(text) == []
    assert parse("PROTOBUF", descriptor.render(None)).canonical(False) == text.canonical(False)


@pytest.mark.parametrize("schema_type, text", [
    ("AVRO", '{"type": "record", "name": "R", "fields": [{"name": "a"}]}'),
    ("AVRO", '{"type": "enum", "name": "E", "symbols": ["A", "A"]}'),
    ("AVRO", '{"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", '
             '"int"], "default": 1}]}'),
    ("JSON", '{"type": "object", "properties": {"a": {"$ref": "#/definitions/missing"}}}'),
    ("JSON", "[1, 2]"),
    ("PROTOBUF", 'syntax = "proto3"; message M { string a = 1; string b = 1; }'),
    ("PROTOBUF", 'syntax = "proto3"; import "nowhere.proto"; message M {}'),
    ("PROTOBUF", "Zm9vYmFy"),  # base64 that is no descriptor: compiled as text, fails
])
def test_invalid_schemas(schema_type: str, text: str) -> None:
    with pytest.raises(InvalidSchema):
        parse(schema_type, text)


RICH_PROTO = '''syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
option java_package = "com.shop.v1";
enum Status { UNKNOWN = 0; PAID = 1; }
message Order {
  message Line { string sku = 1; int32 qty = 2; }
  enum Channel { WEB = 0; STORE = 1; }
  string id = 1;
  repeated Line lines = 2;
  map<string, int64> totals = 3;
  oneof payer { string card = 4; string voucher = 5; }
  optional string note = 6;
  google.protobuf.Timestamp at = 7;
  Status status = 8;
  Channel channel = 9;
  reserved 10 to 12, 15;
  reserved "legacy";
}
'''


def test_a_descriptor_registration_is_served_as_equivalent_proto_text() -> None:
    text = parse("PROTOBUF", RICH_PROTO)
    descriptor = parse("PROTOBUF", text.render("serialized"))
    printed = descriptor.render(None)
    assert "map<string, int64> totals = 3;" in printed and "oneof payer" in printed
    again = parse("PROTOBUF", printed)
    assert again.canonical(False) == text.canonical(False)
    assert text.render(None) == RICH_PROTO  # text registrations are served as registered
