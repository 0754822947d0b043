"""The broker's own state out of every client's reach (issue 32), through real clients.

One broker with all four listeners (PLAINTEXT; SSL requiring a client certificate through
the broker-wide ``--ssl-client-auth``, which KIP-684 keeps off SASL_SSL; SASL_PLAINTEXT;
SASL_SSL with passwords only) and two setting their own client auth (a SASL_SSL one
requiring certificates by ``listener.name.<name>.ssl.client.auth``, an SSL one requiring
none by its spec's option), ``--authorizer`` and one super user. Every principal but
the super user holds ALL on topic ``*``, on the ``__`` prefix, READ and WRITE on ``*``,
and ALL on every group and transactional id. On each listener such a principal (and the
super user) tries to read, forge, truncate, delete, grow, reconfigure, create and list
the names that held credentials and ACLs before the metadata log, Kafka's metadata log
name and the internal topics; then the broker restarts and the same attempts run again.
Nothing changes who can log in or what they may do; each answer is Kafka's code where
Kafka answers the same request (``tests/differential/test_internal_topics.py``).
"""

from __future__ import annotations

import re
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaError as KpError
from kafka.protocol.admin import (
    DescribeLogDirsRequest,
)
from kafka.protocol.admin.acl import CreateAclsRequest, DescribeAclsRequest
from kafka.protocol.admin.users import DescribeUserScramCredentialsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from kafka.structs import TopicPartition as KpTopicPartition

from headrace.broker.security.acls import AclBinding as StoredBinding
from headrace.broker.security.scram import make_credential
from headrace.protocol.records import build_batch
from headrace.testing import EmbeddedBroker, free_port, scaled
from tests.integration import attacks
from tests.integration.legacy_layout import acl_record, credential_record, write_legacy_layout
from tests.integration.rawclient import RawClient
from tests.integration.tls_support import Pki, make_pki

LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
OWN_CLIENT_AUTH = ("SASL_MTLS", "TLS_OPEN")
PRIVATE = ("__headrace_scram_credentials", "__headrace_acls", "__cluster_metadata")
INTERNAL = ("__consumer_offsets", "__transaction_state")
USERS = {"admin": "admin-pw", "mallory": "mallory-pw", "alice": "alice-pw"}
FORGED_PASSWORD = "owned-by-mallory"
CERT_PRINCIPAL = "User:O=headrace tests,CN=mallory"  # the SSL listener's principal
KAFKA_AUTHZID_MESSAGE = ("Authentication failed: Client requested an authorization id that "
                         "is different from username")
INVALID_TOPIC, UNKNOWN_TOPIC, TOPIC_EXISTS, INVALID_REQUEST = 17, 3, 36, 42
TOPIC_DENIED, CLUSTER_DENIED, SASL_FAILED = 29, 31, 58


@dataclass
class Secured:
    broker: EmbeddedBroker
    pki: Pki
    addresses: dict[str, str]

    def client_conf(self, listener: str, user: str = "mallory", password: str | None = None,
                    mechanism: str = "SCRAM-SHA-256", cert: bool = True) -> dict[str, Any]:
        """librdkafka settings for ``listener`` (SASL as ``user``; SSL with the client
        certificate unless ``cert`` is False)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.addresses[listener],
                                "security.protocol": listener}
        if listener.startswith("SASL_"):
            conf.update({"sasl.mechanism": mechanism, "sasl.username": user,
                         "sasl.password": USERS[user] if password is None else password})
        if listener in ("SSL", "SASL_SSL"):
            conf["ssl.ca.location"] = str(self.pki.ca)
        if listener == "SSL" and cert:
            conf.update({"ssl.certificate.location": str(self.pki.client_cert),
                         "ssl.key.location": str(self.pki.client_key)})
        return conf


def tls_context(pki: Pki, cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert:
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return ctx


def connect(s: Secured, listener: str, user: str = "mallory",
            password: str | None = None) -> RawClient:
    """A raw connection on ``listener``, logged in with PLAIN on SASL listeners."""
    tls = tls_context(s.pki, listener == "SSL") if listener in ("SSL", "SASL_SSL") else None
    c = RawClient(s.addresses[listener], timeout=scaled(10), tls=tls)
    if listener.startswith("SASL_"):
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        secret = USERS[user] if password is None else password
        r = c.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{secret}".encode()), 2)
        assert r.error_code == 0, r
    return c


def everyone_may_do_anything_with_topics() -> list[AclBinding]:
    L, P, allow = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED, AclPermissionType.ALLOW
    every = "User:*"
    grants = [(ResourceType.TOPIC, "*", L, op) for op in (AclOperation.ALL, AclOperation.READ,
                                                        AclOperation.WRITE)]
    grants += [(ResourceType.TOPIC, "__", P, AclOperation.ALL),
               (ResourceType.GROUP, "*", L, AclOperation.ALL),
               (ResourceType.TRANSACTIONAL_ID, "*", L, AclOperation.ALL)]
    out = [AclBinding(t, n, p, every, "*", op, allow) for t, n, p, op in grants]
    # Proves who the SSL listener's client is: its certificate's subject, denied one topic.
    out.append(AclBinding(ResourceType.TOPIC, "sasl-only", L, CERT_PRINCIPAL, "*",
                          AclOperation.WRITE, AclPermissionType.DENY))
    return out


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), client_cn="mallory")


@pytest.fixture(scope="module")
def secured(pki: Pki) -> Iterator[Secured]:
    ports = {name: free_port("127.0.0.1") for name in (*LISTENERS, *OWN_CLIENT_AUTH)}
    args = [a for name in LISTENERS for a in ("--listener", f"{name}://127.0.0.1:{ports[name]}")]
    # Two more with their own client auth: a SASL_SSL one asking for certificates too
    # (a broker config), an SSL one asking for none (an option of the listener).
    args += ["--listener", f"SASL_MTLS://127.0.0.1:{ports['SASL_MTLS']}",
             "-c", "listener.name.sasl_mtls.ssl.client.auth=required",
             "--listener", f"TLS_OPEN://127.0.0.1:{ports['TLS_OPEN']}?ssl.client.auth=none",
             "--listener-security-protocol-map", "SASL_MTLS:SASL_SSL,TLS_OPEN:SSL"]
    args += ["--ssl-keystore-location", str(pki.server), "--ssl-truststore-location",
             str(pki.ca), "--ssl-client-auth", "required", "--authorizer"]
    addresses = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    # Set up as the PLAINTEXT operator, then restart with User:admin the only super user.
    with EmbeddedBroker(extra_args=[*args, "--super-users", "User:admin;User:ANONYMOUS"]) as b:
        operator = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        upserts = [UserScramCredentialUpsertion(u, ScramCredentialInfo(m, 4096), p.encode())
                   for u, p in USERS.items()
                   for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
        for f in operator.alter_user_scram_credentials(upserts).values():
            f.result(scaled(30))
        for f in operator.create_acls(everyone_may_do_anything_with_topics()).values():
            f.result(scaled(30))
        b.stop()
        b.extra_args = [*args, "--super-users", "User:admin"]
        b.start()
        yield Secured(b, pki, addresses)


# --- the attempts, each answering its error code ----------------------------------------

Attempt = Callable[[RawClient, str], Any]


def forged_records(topic: str) -> bytes:
    """What an attacker would write: admin's credential with her password, an ACL making
    her a cluster admin, one with operation ANY (the old layout's formats)."""
    cluster_admin = StoredBinding(4, "kafka-cluster", 3, "User:mallory", "*", 2, 3)
    any_op = StoredBinding(4, "kafka-cluster", 3, "User:mallory", "*", 1, 3)
    records = [credential_record("admin", make_credential("SCRAM-SHA-512", FORGED_PASSWORD)),
               acl_record(cluster_admin), acl_record(any_op)]
    if topic in INTERNAL:
        records = [(b"\x00\x01forged-offset-key", b"\x00\x03forged")]
    return build_batch(records, timestamp_ms=int(time.time() * 1000))


def produce_forged(c: RawClient, topic: str) -> int:
    return attacks.produce(c, topic, forged_records(topic))


ATTEMPTS: dict[str, Attempt] = {
    "produce": produce_forged, "fetch": attacks.fetch, "list offsets": attacks.list_offsets,
    "leader epoch": attacks.leader_epoch, "delete records": attacks.delete_records,
    "delete topic": attacks.delete_topic, "create partitions": attacks.create_partitions,
    "alter configs": attacks.alter_configs, "describe configs": attacks.describe_configs,
    "create topic": attacks.create_topic,
    "metadata (auto-create)": lambda c, topic: attacks.metadata(c, topic)[0],
}
# Internal topics: readable, reconfigurable with the grants (Kafka's rules), never changed.
INTERNAL_ANSWERS = {"produce": INVALID_TOPIC, "fetch": 0, "list offsets": 0,
                    "leader epoch": 0, "delete records": INVALID_TOPIC,
                    "delete topic": INVALID_TOPIC, "create partitions": INVALID_TOPIC,
                    "alter configs": 0, "describe configs": 0, "create topic": TOPIC_EXISTS,
                    "metadata (auto-create)": 0, "add to transaction": TOPIC_DENIED}
# Broker-private names: no such topic, ever.
PRIVATE_ANSWERS = {**dict.fromkeys(ATTEMPTS, UNKNOWN_TOPIC), "create topic": INVALID_REQUEST}


def answers(c: RawClient, topic: str) -> dict[str, int]:
    got = {what: attempt(c, topic) for what, attempt in ATTEMPTS.items()}
    if topic in INTERNAL:
        got["add to transaction"] = attacks.add_to_transaction(c, topic)
    return got


def listed(c: RawClient) -> dict[str, bool]:
    r = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
    return {t.name: t.is_internal for t in r.topics}


def attack(s: Secured, listener: str, user: str = "mallory") -> None:
    with connect(s, listener, user) as c:
        for topic in (*PRIVATE, *INTERNAL):
            expected = INTERNAL_ANSWERS if topic in INTERNAL else PRIVATE_ANSWERS
            assert answers(c, topic) == expected, (listener, user, topic)
        topics = listed(c)
        assert not set(PRIVATE) & set(topics)
        assert {name for name, internal in topics.items() if internal} == set(INTERNAL)
        if user == "mallory":  # no cluster grant: no way to ACLs, users or log dirs
            assert admin_answers(c) == [CLUSTER_DENIED] * 4
        else:
            assert not set(PRIVATE) & logged_topics(c)


def admin_answers(c: RawClient) -> list[int]:
    creation = CreateAclsRequest.AclCreation(
        resource_type=4, resource_name="kafka-cluster", resource_pattern_type=3,
        principal="User:mallory", host="*", operation=2, permission_type=3)
    return [
        c.request(CreateAclsRequest(creations=[creation]), 3).results[0].error_code,
        c.request(DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1),
            3).error_code,
        c.request(DescribeUserScramCredentialsRequest(users=[]), 0).error_code,
        c.request(DescribeLogDirsRequest(topics=None), 4).error_code]


def logged_topics(c: RawClient) -> set[str]:
    r = c.request(DescribeLogDirsRequest(topics=None), 4)
    return {t.name for d in r.results for t in d.topics}


def who_can_log_in(s: Secured) -> None:
    """Every user with their own password and nobody with the forged one; the super user
    sees exactly the ACLs and users the operator made."""
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        for user in USERS:
            connect(s, listener, user).close()
        c = RawClient(s.addresses[listener], timeout=scaled(10), tls=tls_context(
            s.pki, False) if listener == "SASL_SSL" else None)
        with c:
            assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
            r = c.request(SaslAuthenticateRequest(
                auth_bytes=f"\0admin\0{FORGED_PASSWORD}".encode()), 2)
            assert r.error_code == SASL_FAILED
    admin = AdminClient(s.client_conf("SASL_SSL", "admin", mechanism="SCRAM-SHA-512"))
    found = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(scaled(30))
    assert sorted(map(str, found)) == sorted(map(str, everyone_may_do_anything_with_topics()))
    described = admin.describe_user_scram_credentials(list(USERS))
    assert {u: len(f.result(scaled(30)).scram_credential_infos)
            for u, f in described.items()} == dict.fromkeys(USERS, 2)


@pytest.mark.parametrize("listener", LISTENERS)
def test_no_grant_reaches_broker_private_state(secured: Secured, listener: str) -> None:
    attack(secured, listener)


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_not_even_a_super_user(secured: Secured, listener: str) -> None:
    attack(secured, listener, "admin")


def test_real_clients_are_refused_alike(secured: Secured) -> None:
    # librdkafka: a produce to an internal topic fails at once with Kafka's code.
    errors: list[Any] = []
    p = Producer({**secured.client_conf("SASL_SSL"), "enable.idempotence": False,
                  "message.timeout.ms": int(scaled(10) * 1000)})
    for topic in INTERNAL:
        p.produce(topic, key=b"k", value=b"forged", partition=0,
                  on_delivery=lambda e, _m: errors.append(e))
    p.flush(scaled(30))
    assert [e.code() if e else 0 for e in errors] == [KafkaError.TOPIC_EXCEPTION] * 2
    # ... lists no private state, and cannot name it.
    admin = AdminClient(secured.client_conf("SSL"))
    assert not set(PRIVATE) & set(admin.list_topics(timeout=scaled(10)).topics)
    c = Consumer({**secured.client_conf("SASL_PLAINTEXT"), "group.id": "g-attack"})
    try:
        for topic in PRIVATE:
            error = c.list_topics(topic, timeout=scaled(10)).topics[topic].error
            assert error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        # An internal topic stays readable with READ (Kafka's rule): the consumer sees it.
        low, high = c.get_watermark_offsets(TopicPartition("__consumer_offsets", 0),
                                            timeout=scaled(10))
        assert 0 <= low <= high
    finally:
        c.close()
    escalate = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                          CERT_PRINCIPAL, "*", AclOperation.ALL, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([escalate])[escalate].result(scaled(30))
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # kafka-python's admin client: truncating, deleting and growing internal topics fail.
    kp = KafkaAdminClient(bootstrap_servers=secured.addresses["SASL_PLAINTEXT"],
                          security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                          sasl_plain_username="mallory", sasl_plain_password=USERS["mallory"])
    try:
        with pytest.raises(KpError, match="InvalidTopic"):
            kp.delete_records({KpTopicPartition("__transaction_state", 0): -1})
        with pytest.raises(KpError, match="InvalidTopic"):
            kp.delete_topics(["__consumer_offsets"])
    finally:
        kp.close()


def test_nothing_changes_across_a_restart(secured: Secured) -> None:
    who_can_log_in(secured)
    secured.broker.restart()
    who_can_log_in(secured)
    for listener in LISTENERS:
        attack(secured, listener)
    assert not any(p.name.startswith(("__headrace", "__cluster"))
                   for p in secured.broker.data_dir.iterdir())


def test_mtls_listener_beside_a_password_only_sasl_ssl_listener(secured: Secured) -> None:
    topic = f"side-by-side-{uuid.uuid4().hex[:6]}"
    # SSL: the certificate is the identity (denied sasl-only by its subject) ...
    p = Producer(secured.client_conf("SSL"))
    p.produce(topic, b"over mutual TLS")
    assert p.flush(scaled(30)) == 0
    errors: list[Any] = []
    p.produce("sasl-only", b"x", on_delivery=lambda e, _m: errors.append(e))
    p.flush(scaled(30))
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # ... and without one the handshake fails.
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)), RawClient(
            secured.addresses["SSL"], timeout=scaled(10),
            tls=tls_context(secured.pki, False)) as c:
        c.request(MetadataRequest(topics=None), 1)
    # SASL_SSL: no certificate asked for; the password is the identity.
    p = Producer(secured.client_conf("SASL_SSL", "alice"))
    p.produce("sasl-only", b"over SASL_SSL")
    p.produce(topic, b"over SASL_SSL")
    assert p.flush(scaled(30)) == 0
    consumer = KafkaConsumer(
        topic, bootstrap_servers=secured.addresses["SASL_SSL"], security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"], ssl_cafile=str(secured.pki.ca),
        auto_offset_reset="earliest")
    values: list[bytes] = []
    deadline = time.monotonic() + scaled(30)
    try:
        while len(values) < 2 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                values += [m.value for m in batch]
    finally:
        consumer.close()
    values.sort()
    assert values == [b"over SASL_SSL", b"over mutual TLS"]


def test_scram_refuses_a_foreign_authorization_id(secured: Secured) -> None:
    address = secured.addresses["SASL_PLAINTEXT"]
    for mechanism, token in (("SCRAM-SHA-256", b"n,a=admin,n=mallory,r=fyko+d2lbbFgONRv9qkxdawL"),
                             ("SCRAM-SHA-512", b"n,a=admin,n=nobody,r=abcdefgh"),
                             ("PLAIN", f"admin\0mallory\0{USERS['mallory']}".encode())):
        with RawClient(address, timeout=scaled(10)) as c:
            assert c.request(SaslHandshakeRequest(mechanism=mechanism), 1).error_code == 0
            r = c.request(SaslAuthenticateRequest(auth_bytes=token), 2)
            assert (r.error_code, r.error_message) == (SASL_FAILED, KAFKA_AUTHZID_MESSAGE)
            assert c.is_closed_by_peer()
    with RawClient(address, timeout=scaled(10)) as c:  # her own name as authzid: fine
        assert c.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1).error_code == 0
        r = c.request(SaslAuthenticateRequest(auth_bytes=b"n,a=mallory,n=mallory,r=abc"), 2)
        assert r.error_code == 0 and r.auth_bytes.startswith(b"r=abc")


def test_a_data_dir_of_the_old_layout_is_migrated(tmp_path: Path) -> None:
    admin = make_credential("SCRAM-SHA-512", USERS["admin"])
    good = StoredBinding(2, "pay", 3, "User:alice", "*", 4, 3)
    any_op = StoredBinding(4, "kafka-cluster", 3, "User:mallory", "*", 1, 3)
    write_legacy_layout(tmp_path, [credential_record("admin", admin)],
                        [acl_record(good), acl_record(any_op)])
    sasl_port = free_port("127.0.0.1")
    with EmbeddedBroker(data_dir=tmp_path, extra_args=[
            "--listener", "PLAINTEXT://127.0.0.1:0", "--listener",
            f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}", "--authorizer",
            "--super-users", "User:admin"]) as b:
        log = "\n".join(b.output_lines())
        assert re.search(r"refused the record at offset 1 of __headrace_acls", log), log
        assert "migrated 2 SCRAM credentials and ACLs" in log
        conf = {"bootstrap.servers": f"127.0.0.1:{sasl_port}",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "admin", "sasl.password": USERS["admin"]}
        admin_client = AdminClient(conf)
        found = admin_client.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)).result(scaled(30))
        assert [(a.name, a.principal, a.operation) for a in found] == [
            ("pay", "User:alice", AclOperation.WRITE)]
        assert not set(admin_client.list_topics(timeout=scaled(10)).topics) & set(PRIVATE)
        b.restart()  # the second start finds the metadata log: nothing migrates again
        assert "\n".join(b.output_lines()).count("migrated 2 SCRAM") == 1
        AdminClient(conf).list_topics(timeout=scaled(10))
    assert not (tmp_path / "__headrace_acls-0").exists()


def test_nothing_replay_would_refuse_is_ever_stored(secured: Secured) -> None:
    admin = AdminClient(secured.client_conf("SASL_SSL", "admin", mechanism="SCRAM-SHA-512"))
    huge_salt = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw", b"s" * 2048)
    with pytest.raises(KafkaException) as refused:
        admin.alter_user_scram_credentials([huge_salt])["carol"].result(scaled(30))
    assert refused.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert "salt of 2048 bytes" in refused.value.args[0].str()


def test_a_listener_sets_its_own_client_auth(secured: Secured) -> None:
    def metadata_over(listener: str, cert: bool, user: str | None = None) -> int:
        with RawClient(secured.addresses[listener], timeout=scaled(10),
                       tls=tls_context(secured.pki, cert)) as c:
            if user is not None:
                assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
                login = f"\0{user}\0{USERS[user]}".encode()
                assert c.request(SaslAuthenticateRequest(auth_bytes=login), 2).error_code == 0
            return len(c.request(MetadataRequest(topics=None), 1).brokers)

    # listener.name.sasl_mtls.ssl.client.auth=required: a certificate and a password
    assert metadata_over("SASL_MTLS", cert=True, user="alice") == 1
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        metadata_over("SASL_MTLS", cert=False, user="alice")
    # TLS_OPEN://...?ssl.client.auth=none: the broker-wide "required" does not apply
    assert metadata_over("TLS_OPEN", cert=False) == 1
