"""Broker-private state without sockets: credential and ACL records are checked on replay
(a record of the wrong shape is refused with an error naming it, never applied), the
legacy topics migrate into the metadata log and disappear, listeners get their TLS client
auth as KIP-684 says, and SCRAM and PLAIN refuse a foreign authorization id."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from headrace.broker.errors import BrokerConfigError
from headrace.broker.internal_topics import RESERVED_TOPICS
from headrace.broker.listeners import listener_client_auth, parse_listeners
from headrace.broker.security import acls as acl_records
from headrace.broker.security import credentials as cred_records
from headrace.broker.security.acls import AclBinding, Authorizer, AuthorizerConfig
from headrace.broker.security.credentials import CredentialStore
from headrace.broker.security.legacy_topics import LEGACY_TOPICS, migrate
from headrace.broker.security.scram import (
    AuthenticationError,
    AuthorizationIdError,
    ScramServer,
    make_credential,
    parse_plain,
    password_matches,
)
from headrace.storage.config import LogConfig
from headrace.storage.manager import LogManager
from headrace.storage.metadata_log import MetadataLog, MetadataRecord
from tests.integration.legacy_layout import acl_record, credential_record, write_legacy_layout

ALICE = make_credential("SCRAM-SHA-256", "alice-pw")
ADMIN = make_credential("SCRAM-SHA-512", "admin-pw")
GOOD_ACL = AclBinding(2, "pay", 3, "User:alice", "*", 4, 3)  # ALLOW alice WRITE topic pay


def load(data_dir: Path) -> tuple[CredentialStore, Authorizer]:
    metadata = MetadataLog(data_dir)
    store, authorizer = CredentialStore(metadata), Authorizer(metadata, AuthorizerConfig(True))
    store.load()
    authorizer.load()
    metadata.finish_replay()
    return store, authorizer


def forged(value: dict[str, object]) -> dict[str, object]:
    return {**cred_records.encode(ADMIN), **value}


BAD_CREDENTIALS = {
    "zero iterations": ("SCRAM-SHA-512:admin", forged({"iterations": 0})),
    "iterations below Kafka's minimum": ("SCRAM-SHA-512:admin", forged({"iterations": 4095})),
    "iterations as text": ("SCRAM-SHA-512:admin", forged({"iterations": "8192"})),
    "a short stored key": ("SCRAM-SHA-512:admin", forged({"stored_key": "AAAA"})),
    "an empty salt": ("SCRAM-SHA-512:admin", forged({"salt": ""})),
    "undecodable base64": ("SCRAM-SHA-512:admin", forged({"server_key": "!!"})),
    "an unknown mechanism": ("SCRAM-SHA-1:admin", forged({})),
    "no user": ("SCRAM-SHA-512:", forged({})),
    "not an object": ("SCRAM-SHA-512:admin", [1, 2]),
}


@pytest.mark.parametrize("case", list(BAD_CREDENTIALS))
def test_credential_records_of_the_wrong_shape_are_refused(
        tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture) -> None:
    key, value = BAD_CREDENTIALS[case]
    MetadataLog(tmp_path).append([
        MetadataRecord("scram", "SCRAM-SHA-512:admin", cred_records.encode(ADMIN)),
        MetadataRecord("scram", key, value)])
    with caplog.at_level(logging.ERROR):
        store, _ = load(tmp_path)
    assert f"refused scram record {key!r} at byte" in caplog.text
    assert store.lookup("admin", "SCRAM-SHA-512") == ADMIN  # the forgery changed nothing


def binding(**change: object) -> dict[str, object]:
    b = {"resource_type": 4, "resource_name": "kafka-cluster", "pattern_type": 3,
         "principal": "User:mallory", "host": "*", "operation": 1, "permission": 3}
    return {**b, **change}


BAD_ACLS = {
    "operation ANY": binding(operation=1),
    "operation UNKNOWN": binding(operation=0),
    "resource type ANY": binding(resource_type=1, operation=2),
    "pattern ANY": binding(pattern_type=1, operation=2),
    "pattern MATCH": binding(pattern_type=2, operation=2),
    "permission ANY": binding(operation=2, permission=1),
    "a principal without a type": binding(operation=2, principal="mallory"),
    "a cluster not named kafka-cluster": binding(operation=2, resource_name="x"),
    "an operation as text": binding(operation="ALL"),
    "an extra field": {**binding(operation=2), "note": "x"},
}


@pytest.mark.parametrize("case", list(BAD_ACLS))
def test_acl_records_of_the_wrong_shape_are_refused(
        tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture) -> None:
    key = json.dumps(BAD_ACLS[case], sort_keys=True)
    MetadataLog(tmp_path).append([
        MetadataRecord("acl", acl_records.record_key(GOOD_ACL), True),
        MetadataRecord("acl", key, True)])
    with caplog.at_level(logging.ERROR):
        _, authorizer = load(tmp_path)
    assert f"refused acl record {key!r} at byte" in caplog.text
    assert authorizer.bindings() == [GOOD_ACL]
    assert not authorizer.authorize("User:mallory", "1.2.3.4", 7, 4, "kafka-cluster")


def test_undecodable_and_odd_valued_acl_records_are_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    MetadataLog(tmp_path).append([
        MetadataRecord("acl", "{not json", True),
        MetadataRecord("acl", acl_records.record_key(GOOD_ACL), "yes")])
    with caplog.at_level(logging.ERROR):
        _, authorizer = load(tmp_path)
    assert caplog.text.count("refused acl record") == 2
    assert authorizer.bindings() == []


def test_written_state_survives_reopening(tmp_path: Path) -> None:
    store, authorizer = load(tmp_path)
    store.write([("alice", "SCRAM-SHA-256", ALICE), ("admin", "SCRAM-SHA-512", ADMIN)])
    authorizer.create([GOOD_ACL])
    store.write([("admin", "SCRAM-SHA-512", None)])
    store, authorizer = load(tmp_path)
    assert store.credentials == {("alice", "SCRAM-SHA-256"): ALICE}
    assert authorizer.bindings() == [GOOD_ACL]


def legacy(tmp_path: Path) -> Path:
    bad_acl = acl_records.AclBinding(**binding(operation=1))  # type: ignore[arg-type]
    zero = credential_record("mallory", make_credential("SCRAM-SHA-256", "m"))
    doc = json.loads(zero[1] or b"")
    doc["iterations"] = 0
    write_legacy_layout(tmp_path, [
        credential_record("alice", ALICE), credential_record("admin", ADMIN),
        credential_record("gone", ALICE), (b"SCRAM-SHA-256\0gone", None),
        (zero[0], json.dumps(doc).encode())],
        [acl_record(GOOD_ACL), acl_record(bad_acl),
         acl_record(AclBinding(3, "g", 3, "User:bob", "*", 3, 3)),
         acl_record(AclBinding(3, "g", 3, "User:bob", "*", 3, 3), present=False)])
    return tmp_path


def test_the_legacy_topics_migrate_validated_then_disappear(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    logs = LogManager(legacy(tmp_path), LogConfig())
    assert set(LEGACY_TOPICS) <= set(logs.topics)
    with caplog.at_level(logging.WARNING):
        migrate(logs, MetadataLog(tmp_path))
    assert not set(LEGACY_TOPICS) & set(logs.topics)
    assert not any((tmp_path / f"{t}-0").exists() for t in LEGACY_TOPICS)
    assert "refused the record at offset 4 of __headrace_scram_credentials" in caplog.text
    assert "refused the record at offset 1 of __headrace_acls" in caplog.text
    store, authorizer = load(tmp_path)
    assert store.credentials == {("alice", "SCRAM-SHA-256"): ALICE,
                                 ("admin", "SCRAM-SHA-512"): ADMIN}
    assert password_matches(store.credentials[("admin", "SCRAM-SHA-512")], "admin-pw")
    assert authorizer.bindings() == [GOOD_ACL]
    # A second start migrates nothing again.
    migrate(LogManager(tmp_path, LogConfig()), MetadataLog(tmp_path))
    assert load(tmp_path)[1].bindings() == [GOOD_ACL]


def test_a_crash_after_writing_the_metadata_log_only_deletes_on_the_next_start(
        tmp_path: Path) -> None:
    logs = LogManager(legacy(tmp_path), LogConfig())
    metadata = MetadataLog(tmp_path)
    metadata.initialize([MetadataRecord("acl", acl_records.record_key(GOOD_ACL), True)])
    migrate(logs, metadata)  # the log exists: the topics are only deleted
    assert not set(LEGACY_TOPICS) & set(logs.topics)
    store, authorizer = load(tmp_path)
    assert store.credentials == {} and authorizer.bindings() == [GOOD_ACL]


def test_the_legacy_names_are_reserved() -> None:
    assert set(LEGACY_TOPICS) <= RESERVED_TOPICS


def test_tls_client_auth_per_listener_as_kip_684() -> None:
    auth, rest = listener_client_auth({"listener.name.secure.ssl.client.auth": "required",
                                       "log.retention.ms": "1"})
    assert auth == {"SECURE": "required"} and rest == {"log.retention.ms": "1"}
    listeners = {x.name: x for x in parse_listeners(
        ["PLAINTEXT://:0", "SSL://:0", "SASL_SSL://:0", "SECURE://:0",
         "OTHER://:0?ssl.client.auth=requested"], "SECURE:SASL_SSL,OTHER:SSL", auth)}
    got = {name: x.client_auth("required") for name, x in listeners.items()}
    # the broker-wide setting reaches SSL listeners only; a listener's own wins
    assert got == {"PLAINTEXT": "none", "SSL": "required", "SASL_SSL": "none",
                   "SECURE": "required", "OTHER": "requested"}
    assert listeners["SSL"].client_auth("none") == "none"


@pytest.mark.parametrize(("specs", "auth", "error"), [
    (["SSL://:0?ssl.client.auth=always"], {}, "must be none, requested or required"),
    (["SSL://:0?ssl.keystore.location=x"], {}, "unknown option"),
    (["PLAINTEXT://:0?ssl.client.auth=required"], {}, "SSL and SASL_SSL listeners only"),
    (["SSL://:0"], {"NOPE": "required"}, "names no listener"),
])
def test_bad_client_auth_settings_are_refused(specs: list[str], auth: dict[str, str],
                                              error: str) -> None:
    with pytest.raises(BrokerConfigError, match=error):
        parse_listeners(specs, "", auth)


KAFKA_AUTHZID_MESSAGE = ("Authentication failed: Client requested an authorization id that "
                         "is different from username")


def test_scram_refuses_a_foreign_authorization_id() -> None:
    def lookup(user: str) -> object:
        return ALICE if user == "alice" else None

    for user in ("alice", "nobody"):  # refused alike: no hint of who exists
        with pytest.raises(AuthorizationIdError, match=KAFKA_AUTHZID_MESSAGE):
            ScramServer("SCRAM-SHA-256", lookup).first(f"n,a=admin,n={user},r=abc".encode())
    assert ScramServer("SCRAM-SHA-256", lookup).first(b"n,a=alice,n=alice,r=abc")
    with pytest.raises(AuthenticationError, match="malformed"):
        ScramServer("SCRAM-SHA-256", lookup).first(b"n,admin,n=alice,r=abc")


def test_plain_refuses_a_foreign_authorization_id() -> None:
    assert parse_plain(b"alice\0alice\0pw") == ("alice", "alice", "pw")
    with pytest.raises(AuthorizationIdError, match=KAFKA_AUTHZID_MESSAGE):
        parse_plain(b"admin\0alice\0pw")

