"""The Confluent REST surface, through Confluent's own client, against a real registry
process on a real broker: register, evolve, read by id, lookup, delete soft then hard,
config and mode per subject, references, and the error codes."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from headrace.registry.client import RegistryClient, RegistryClientError
from tests.registry.schemas import USER_BREAKING, USER_V1, USER_V2, avro_record, field


def _code(excinfo: pytest.ExceptionInfo[SchemaRegistryError]) -> int:
    return int(excinfo.value.error_code)


def test_register_evolve_and_read_back(sr: SchemaRegistryClient, subject: str) -> None:
    first = sr.register_schema(subject, Schema(USER_V1, "AVRO"))
    assert sr.register_schema(subject, Schema(USER_V1, "AVRO")) == first  # idempotent
    second = sr.register_schema(subject, Schema(USER_V2, "AVRO"))
    assert second != first
    assert sr.get_versions(subject) == [1, 2]
    latest = sr.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, second)
    assert json.loads(sr.get_schema(first).schema_str) == json.loads(USER_V1)
    assert sr.get_version(subject, 1).schema_id == first
    found = sr.lookup_schema(subject, Schema(USER_V2, "AVRO"))
    assert (found.version, found.schema_id) == (2, second)
    assert subject in sr.get_subjects()
    assert subject in sr.get_subjects_by_schema_id(second)


def test_same_schema_in_another_subject_reuses_its_id(sr: SchemaRegistryClient,
                                                      subject: str) -> None:
    schema_id = sr.register_schema(subject, Schema(USER_V1, "AVRO"))
    spaced = json.dumps(json.loads(USER_V1), indent=4)  # same schema, other whitespace
    assert sr.register_schema(subject + "-other", Schema(spaced, "AVRO")) == schema_id
    versions = {(v.subject, v.version) for v in sr.get_schema_versions(schema_id)}
    assert {(subject, 1), (subject + "-other", 1)} <= versions  # (earlier tests' too)


def test_incompatible_schema_is_refused_with_409(sr: SchemaRegistryClient,
                                                 subject: str) -> None:
    sr.register_schema(subject, Schema(USER_V1, "AVRO"))
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema(subject, Schema(USER_BREAKING, "AVRO"))
    assert _code(e) == 409 and e.value.http_status_code == 409
    assert sr.get_versions(subject) == [1]  # nothing stored
    assert not sr.test_compatibility(subject, Schema(USER_BREAKING, "AVRO"))
    assert sr.test_compatibility(subject, Schema(USER_V2, "AVRO"))


def test_verbose_compatibility_names_the_reason(rest: RegistryClient, subject: str) -> None:
    rest.register(subject, USER_V1)
    answer = rest.check(subject, USER_BREAKING, version="latest")
    assert answer["is_compatible"] is False
    assert any("type" in m for m in answer["messages"]), answer


def test_per_subject_compatibility(sr: SchemaRegistryClient, subject: str) -> None:
    sr.register_schema(subject, Schema(USER_V1, "AVRO"))
    with pytest.raises(SchemaRegistryError) as e:
        sr.get_compatibility(subject)
    assert _code(e) == 40408
    sr.set_compatibility(subject, "NONE")
    assert sr.get_compatibility(subject) == "NONE"
    sr.register_schema(subject, Schema(USER_BREAKING, "AVRO"))  # NONE lets it through
    assert sr.get_versions(subject) == [1, 2]
    assert sr.get_compatibility() == "BACKWARD"  # the global level is untouched
    with pytest.raises(SchemaRegistryError) as e:
        sr.set_compatibility(subject, "SIDEWAYS")
    assert _code(e) == 42203


def test_soft_then_hard_delete(sr: SchemaRegistryClient, rest: RegistryClient,
                               subject: str) -> None:
    own = avro_record("Own" + subject.replace("-", "_"), field("a", "int"))  # its own id
    first = sr.register_schema(subject, Schema(own, "AVRO"))
    sr.set_compatibility(subject, "NONE")
    sr.register_schema(subject, Schema(USER_V2, "AVRO"))
    with pytest.raises(SchemaRegistryError) as e:
        sr.delete_subject(subject, permanent=True)
    assert _code(e) == 40405  # a hard delete needs a soft delete first
    assert sr.delete_version(subject, 2) == 2
    assert sr.get_versions(subject) == [1]
    assert rest.versions(subject, deleted=True) == [1, 2]
    assert sr.delete_subject(subject) == [1]
    assert subject not in sr.get_subjects()
    assert subject in rest.subjects(deleted=True)
    with pytest.raises(SchemaRegistryError) as e:
        sr.get_versions(subject)
    assert _code(e) == 40401
    with pytest.raises(SchemaRegistryError) as e:
        sr.delete_subject(subject)
    assert _code(e) == 40404
    assert sr.get_schema(first).schema_str  # ids stay readable after a soft delete
    assert sorted(sr.delete_subject(subject, permanent=True)) == [1, 2]
    assert subject not in rest.subjects(deleted=True)
    with pytest.raises(SchemaRegistryError) as e:
        SchemaRegistryClient({"url": rest.url}).get_schema(first)  # (sr caches by id)
    assert _code(e) == 40403
    # re-registering after a permanent delete gets a new id: ids are never reused
    assert sr.register_schema(subject, Schema(own, "AVRO")) > first


def test_references_and_referencedby(sr: SchemaRegistryClient, rest: RegistryClient,
                                     subject: str) -> None:
    address = avro_record("Address", field("street", "string"), namespace="com.acme")
    sr.register_schema(subject + "-address", Schema(address, "AVRO"))
    person = avro_record("Person", field("name", "string"), field("home", "com.acme.Address"))
    refs = [SchemaReference("com.acme.Address", subject + "-address", 1)]
    person_id = sr.register_schema(subject, Schema(person, "AVRO", refs))
    fetched = sr.get_schema(person_id)
    assert [(r.name, r.subject, r.version) for r in fetched.references] == [
        ("com.acme.Address", subject + "-address", 1)]
    assert sr.get_referenced_by(subject + "-address", 1) == [person_id]
    with pytest.raises(SchemaRegistryError) as e:
        sr.delete_subject(subject + "-address")
    assert _code(e) == 42206
    with pytest.raises(SchemaRegistryError) as e:  # without its reference it doesn't parse
        sr.register_schema(subject + "-bare", Schema(person, "AVRO"))
    assert _code(e) == 42201


def test_modes(sr: SchemaRegistryClient, rest: RegistryClient, subject: str) -> None:
    sr.register_schema(subject, Schema(USER_V1, "AVRO"))
    assert sr.get_global_mode() == "READWRITE"
    sr.update_mode(subject, "READONLY")
    assert sr.get_mode(subject) == "READONLY"
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema(subject, Schema(USER_V2, "AVRO"))
    assert _code(e) == 42205
    sr.delete_mode(subject)
    sr.register_schema(subject, Schema(USER_V2, "AVRO"))
    with pytest.raises(SchemaRegistryError) as e:
        sr.update_mode(subject, "IMPORT")  # the subject has schemas
    assert _code(e) == 42205
    imported = subject + "-imported"
    sr.update_mode(imported, "IMPORT")
    body = {"schema": USER_V1, "id": 9000, "version": 7}
    answer = rest.request("POST", f"/subjects/{imported}/versions", body)
    assert (answer["id"], answer["version"]) == (9000, 7)
    sr.update_mode(imported, "READWRITE")
    with pytest.raises(SchemaRegistryError) as e:
        sr.update_mode(subject, "SOMETIMES")
    assert _code(e) == 42204
    # ids handed out after an import go past it
    assert sr.register_schema(subject + "-after", Schema(avro_record("Z"), "AVRO")) > 9000


@pytest.mark.parametrize("body, status, code", [
    ({"schema": "{not json"}, 422, 42201),
    ({"schema": json.dumps({"type": "record", "name": "X", "fields": [
        {"name": "a", "type": "int", "default": "text"}]})}, 422, 42201),
    ({"schema": json.dumps({"type": "nosuchtype"})}, 422, 42201),
    ({"schema": "{}", "schemaType": "XML"}, 422, 42201),
    ({"schema": "syntax = \"proto3\"; message A { Missing m = 1; }", "schemaType": "PROTOBUF"},
     422, 42201),
    ({"schema": json.dumps({"type": "strng"}), "schemaType": "JSON"}, 422, 42201),
    ({"schema": "", "schemaType": "JSON"}, 422, 42201),
    ({"nothing": 1}, 422, 42201),
    ({"schema": USER_V1, "references": [{"name": "x", "subject": "nope", "version": 1}]},
     422, 42201),
])
def test_bad_schemas_get_the_documented_code_and_store_nothing(
        rest: RegistryClient, subject: str, body: dict[str, object], status: int,
        code: int) -> None:
    with pytest.raises(RegistryClientError) as e:
        rest.request("POST", f"/subjects/{subject}/versions", body)
    assert (e.value.http_status, e.value.error_code) == (status, code), e.value.message
    assert subject not in rest.subjects(deleted=True)


def test_bad_requests(rest: RegistryClient, subject: str) -> None:
    cases = [
        ("GET", f"/subjects/{subject}/versions/zero", 422, 42202),
        ("GET", f"/subjects/{subject}/versions/1", 404, 40401),
        ("GET", "/schemas/ids/987654321", 404, 40403),
        ("GET", "/schemas/ids/abc", 404, 404),
        ("GET", "/no/such/route", 404, 404),
        ("PUT", "/config", 422, 42203),
    ]
    for method, path, status, code in cases:
        with pytest.raises(RegistryClientError) as e:
            rest.request(method, path, {} if method == "PUT" else None)
        assert (e.value.http_status, e.value.error_code) == (status, code), (path, e.value)
    rest.register(subject, USER_V1)
    with pytest.raises(RegistryClientError) as e:
        rest.request("GET", f"/subjects/{subject}/versions/5")
    assert e.value.error_code == 40402
    with pytest.raises(RegistryClientError) as e:
        rest.request("POST", f"/subjects/{subject}", {"schema": USER_V2})
    assert e.value.error_code == 40403


def test_oversize_body_is_refused(rest: RegistryClient, subject: str) -> None:
    huge = avro_record("Big", field("a", "string", doc="x" * (5 * 1024 * 1024)))
    with pytest.raises(RegistryClientError) as e:
        rest.register(subject, huge)
    assert e.value.http_status == 413
    assert subject not in rest.subjects(deleted=True)


def test_types_and_listings(rest: RegistryClient, subject: str) -> None:
    assert sorted(rest.request("GET", "/schemas/types")) == ["AVRO", "JSON", "PROTOBUF"]
    rest.register(subject, USER_V1)
    raw = rest.request("GET", f"/subjects/{subject}/versions/1/schema")
    assert raw == json.loads(USER_V1)
    listed = rest.request("GET", "/schemas", params={"subjectPrefix": subject})
    assert [s["subject"] for s in listed] == [subject]
