"""ACLs (``headrace broker --authorizer``): a principal x resource x operation matrix where
each allowed action works and every other one fails with Kafka's code, through
librdkafka, kafka-python, aiokafka and raw requests; ACLs managed with ``headrace acls``
and the Admin API, kept across a restart; deny beats allow; super users; no authorizer
means SECURITY_DISABLED for the ACL APIs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import TopicAuthorizationFailedError
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError as KpTopicAuthorizationFailed
from kafka.protocol.admin.acl import DescribeAclsRequest
from kafka.protocol.admin.users import DescribeUserScramCredentialsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.rawclient import RawClient

PASSWORD = "secret"
USERS = ("alice", "bob", "carol", "dave")


def cli(b: EmbeddedBroker, *args: str, password: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headrace", *args, "-b", b.bootstrap_servers],
                          capture_output=True, text=True, timeout=scaled(60),
                          env={**os.environ, "HEADRACE_USER_PASSWORD": password,
                               "COLUMNS": "200"})


def allow(b: EmbeddedBroker, principal: str, *args: str) -> None:
    done = cli(b, "acls", "add", "--principal", principal, *args)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    """PLAINTEXT for the operator (User:ANONYMOUS, a super user), SASL_PLAINTEXT for the
    users, ACLs enforced."""
    with EmbeddedBroker(extra_args=[
            "--listener", "PLAINTEXT://127.0.0.1:0", "--listener", "SASL_PLAINTEXT://127.0.0.1:0",
            "--authorizer", "--super-users", "User:ANONYMOUS;User:root"]) as b:
        for user in (*USERS, "root"):
            assert cli(b, "users", "add", user, password=PASSWORD).returncode == 0
        for topic in ("pay-in", "secret", "public"):
            assert cli(b, "topics", "create", topic, "--partitions", "1").returncode == 0
        allow(b, "User:alice", "--operation", "WRITE", "--operation", "CREATE",
              "--topic", "pay-", "--prefixed")
        allow(b, "User:alice", "--operation", "WRITE", "--transactional-id", "alice-tx")
        allow(b, "User:bob", "--operation", "READ", "--topic", "pay-in")
        allow(b, "User:bob", "--operation", "READ", "--group", "bob-")
        allow(b, "User:bob", "--operation", "READ", "--group", "bob-", "--prefixed")
        allow(b, "User:*", "--operation", "READ", "--topic", "public")
        allow(b, "User:*", "--operation", "READ", "--group", "open-", "--prefixed")
        done = cli(b, "acls", "add", "--principal", "User:carol", "--operation", "READ",
                   "--topic", "public", "--deny")
        assert done.returncode == 0, done.stderr
        allow(b, "User:dave", "--operation", "IDEMPOTENT_WRITE", "--cluster")
        allow(b, "User:dave", "--operation", "ALTER", "--cluster")
        allow(b, "User:dave", "--operation", "DESCRIBE", "--cluster")
        # Seed one record the readers can read.
        p = Producer({"bootstrap.servers": b.bootstrap_servers})
        for topic in ("pay-in", "public", "secret"):
            p.produce(topic, b"seed")
        assert p.flush(scaled(30)) == 0
        yield b


def conf(b: EmbeddedBroker, user: str, **more: Any) -> dict[str, Any]:
    return {"bootstrap.servers": b.listeners["SASL_PLAINTEXT"],
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": PASSWORD, **more}


def produce_error(b: EmbeddedBroker, user: str, topic: str) -> int:
    """The delivery error code of one record (0: delivered)."""
    errors: list[Any] = []
    p = Producer(conf(b, user, **{"message.timeout.ms": int(scaled(10_000)),
                                  "enable.idempotence": False}))
    p.produce(topic, b"v", on_delivery=lambda e, _m: errors.append(e))
    p.flush(scaled(30))
    assert len(errors) == 1
    return 0 if errors[0] is None else int(errors[0].code())


def consume_error(b: EmbeddedBroker, user: str, topic: str, group: str | None = None) -> int:
    """0 when ``user`` reads the seed record of ``topic`` as a member of ``group`` (by
    default a fresh one everyone may use), else the error code the consumer got."""
    c = Consumer(conf(b, user, **{"group.id": group or f"open-{uuid.uuid4().hex[:6]}",
                                  "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False}))
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + scaled(20)
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return int(m.error().code())
            return 0
        raise AssertionError(f"{user} got neither a record nor an error from {topic}")
    finally:
        c.close()


@pytest.mark.parametrize(("user", "topic", "code"), [
    ("alice", "pay-in", 0),  # PREFIXED WRITE
    ("alice", "secret", KafkaError.TOPIC_AUTHORIZATION_FAILED),
    ("bob", "pay-in", KafkaError.TOPIC_AUTHORIZATION_FAILED),  # READ does not imply WRITE
    ("carol", "public", KafkaError.TOPIC_AUTHORIZATION_FAILED),
])
def test_produce_matrix(broker: EmbeddedBroker, user: str, topic: str, code: int) -> None:
    assert produce_error(broker, user, topic) == code


@pytest.mark.parametrize(("user", "topic", "code"), [
    ("bob", "pay-in", 0),
    ("alice", "pay-in", KafkaError.TOPIC_AUTHORIZATION_FAILED),  # WRITE does not imply READ
    ("bob", "secret", KafkaError.TOPIC_AUTHORIZATION_FAILED),
    ("alice", "public", 0),  # User:* READ
    ("carol", "public", KafkaError.TOPIC_AUTHORIZATION_FAILED),  # DENY beats User:* ALLOW
])
def test_fetch_matrix(broker: EmbeddedBroker, user: str, topic: str, code: int) -> None:
    assert consume_error(broker, user, topic) == code


def test_consumer_groups(broker: EmbeddedBroker) -> None:
    # bob may READ the groups starting with "bob-" and the topic: a whole group round trip.
    assert consume_error(broker, "bob", "pay-in", group="bob-readers") == 0
    # ... but not another group (FindCoordinator is refused), nor alice his.
    assert consume_error(broker, "bob", "pay-in", group="other") == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    assert consume_error(broker, "alice", "public", group="bob-readers") == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    # Offsets: bob commits to his group on the topic he may read, not on another.
    c = Consumer(conf(broker, "bob", **{"group.id": "bob-commits"}))
    try:
        c.commit(offsets=[TopicPartition("pay-in", 0, 1)], asynchronous=False)
        with pytest.raises(KafkaException) as e:
            c.commit(offsets=[TopicPartition("secret", 0, 1)], asynchronous=False)
        assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert c.committed([TopicPartition("pay-in", 0)], timeout=scaled(10))[0].offset == 1
    finally:
        c.close()


def test_transactional_producers(broker: EmbeddedBroker) -> None:
    p = Producer(conf(broker, "alice", **{"transactional.id": "alice-tx"}))
    p.init_transactions(scaled(30))
    p.begin_transaction()
    p.produce("pay-in", b"in a transaction")
    p.commit_transaction(scaled(30))
    # bob may not use alice's transactional id ...
    p = Producer(conf(broker, "bob", **{"transactional.id": "alice-tx"}))
    with pytest.raises(KafkaException) as e:
        p.init_transactions(scaled(30))
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # ... and alice not another one.
    p = Producer(conf(broker, "alice", **{"transactional.id": "other-tx"}))
    with pytest.raises(KafkaException) as e:
        p.init_transactions(scaled(30))
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def login(address: str, user: str) -> RawClient:
    c = RawClient(address)
    assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    r = c.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{PASSWORD}".encode()), 1)
    assert r.error_code == 0, r
    return c


def test_metadata_hides_topics(broker: EmbeddedBroker) -> None:
    address = broker.listeners["SASL_PLAINTEXT"]
    with login(address, "bob") as c:
        every = c.request(MetadataRequest(topics=None), 9)
        # bob may describe pay-in (READ implies DESCRIBE) and public (User:*), not secret
        assert {t.name for t in every.topics} == {"pay-in", "public"}
        named = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name="secret")], allow_auto_topic_creation=True,
            include_topic_authorized_operations=True), 9)
        assert [(t.name, t.error_code) for t in named.topics] == [("secret", 29)]
        named = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name="pay-in")], allow_auto_topic_creation=True,
            include_topic_authorized_operations=True), 9)
        # READ (3) and DESCRIBE (8), the latter implied
        assert named.topics[0].authorized_operations == {3, 8}
    with login(address, "alice") as c:  # CREATE on pay-*: auto-created; elsewhere refused
        r = c.request(MetadataRequest(topics=[
            MetadataRequest.MetadataRequestTopic(name="pay-auto"),
            MetadataRequest.MetadataRequestTopic(name="nope-auto")],
            allow_auto_topic_creation=True), 9)
        assert [(t.name, t.error_code) for t in r.topics] == [("pay-auto", 0),
                                                              ("nope-auto", 29)]


def test_idempotent_producers_need_a_write(broker: EmbeddedBroker) -> None:
    address = broker.listeners["SASL_PLAINTEXT"]
    req = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                producer_id=-1, producer_epoch=-1)
    codes = {}
    for user in ("alice", "bob", "dave"):  # WRITE on pay-*, READ only, IDEMPOTENT_WRITE
        with login(address, user) as c:
            codes[user] = c.request(req, 4).error_code
    assert codes == {"alice": 0, "bob": 31, "dave": 0}


def test_admin_operations(broker: EmbeddedBroker) -> None:
    alice = AdminClient(conf(broker, "alice"))
    done = alice.create_topics([NewTopic("pay-new", 1, 1), NewTopic("other-new", 1, 1)])
    done["pay-new"].result(scaled(10))
    with pytest.raises(KafkaException) as e:
        done["other-new"].result(scaled(10))
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        alice.delete_topics(["pay-new"])["pay-new"].result(scaled(10))
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # ACLs themselves: DESCRIBE / ALTER on the cluster. (librdkafka's describe_acls
    # answers an empty list for a refusal, so the refusal is checked on the wire.)
    with login(broker.listeners["SASL_PLAINTEXT"], "alice") as c:
        r = c.request(DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1), 3)
        assert (r.error_code, r.resources) == (31, [])
    refused = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:alice",
                         "*", AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as e:
        alice.create_acls([refused])[refused].result(scaled(10))
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    dave = AdminClient(conf(broker, "dave"))
    found = dave.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, "public", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(scaled(10))
    assert sorted((b.principal, b.permission_type.name) for b in found) == [
        ("User:*", "ALLOW"), ("User:carol", "DENY")]
    # SCRAM users: DESCRIBE on the cluster (dave may, alice may not; on the wire, as
    # librdkafka 2.16 corrupts its heap on a refused describe)
    assert "alice" in dave.describe_user_scram_credentials().result(scaled(10))
    with login(broker.listeners["SASL_PLAINTEXT"], "alice") as c:
        r = c.request(DescribeUserScramCredentialsRequest(users=None), 0)
        assert (r.error_code, r.results) == (31, [])


def test_grant_and_revoke_take_effect_at_once(broker: EmbeddedBroker) -> None:
    assert produce_error(broker, "carol", "secret") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(broker, "User:carol", "--operation", "WRITE", "--topic", "secret")
    assert produce_error(broker, "carol", "secret") == 0
    done = cli(broker, "acls", "delete", "--principal", "User:carol", "--topic", "secret")
    assert done.returncode == 0 and "deleted ALLOW User:carol from * WRITE TOPIC:secret" in \
        done.stdout, done.stderr
    assert produce_error(broker, "carol", "secret") == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_super_users_and_hosts(broker: EmbeddedBroker) -> None:
    assert produce_error(broker, "root", "secret") == 0  # super user
    # An ACL for another host does not apply to a client on 127.0.0.1.
    allow(broker, "User:carol", "--operation", "WRITE", "--topic", "secret", "--host", "10.9.9.9")
    assert produce_error(broker, "carol", "secret") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(broker, "User:carol", "--operation", "WRITE", "--topic", "secret", "--host", "127.0.0.1")
    assert produce_error(broker, "carol", "secret") == 0
    assert cli(broker, "acls", "delete", "--principal", "User:carol", "--topic",
               "secret").returncode == 0


def test_kafka_python_and_aiokafka(broker: EmbeddedBroker) -> None:
    def kp(user: str) -> KafkaProducer:
        # not idempotent: bob may write nowhere, so InitProducerId would refuse him first
        return KafkaProducer(bootstrap_servers=broker.listeners["SASL_PLAINTEXT"],
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                             sasl_plain_username=user, sasl_plain_password=PASSWORD,
                             max_block_ms=10000, enable_idempotence=False)
    producer = kp("alice")
    producer.send("pay-in", b"kafka-python").get(scaled(10))
    producer.close()
    producer = kp("bob")
    with pytest.raises(KpTopicAuthorizationFailed):
        producer.send("pay-in", b"kafka-python").get(scaled(10))
    producer.close()

    async def run() -> None:
        sasl = {"bootstrap_servers": broker.listeners["SASL_PLAINTEXT"],
                "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}
        consumer = AIOKafkaConsumer("pay-in", group_id="bob-aio", auto_offset_reset="earliest",
                                    sasl_plain_username="bob", sasl_plain_password=PASSWORD,
                                    **sasl)
        await consumer.start()
        try:
            record = await asyncio.wait_for(consumer.getone(), scaled(20))
            assert record.topic == "pay-in"
        finally:
            await consumer.stop()
        producer = AIOKafkaProducer(sasl_plain_username="bob", sasl_plain_password=PASSWORD,
                                    **sasl)
        await producer.start()
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                await asyncio.wait_for(producer.send_and_wait("pay-in", b"aio"), scaled(20))
        finally:
            await producer.stop()
    asyncio.run(run())


def test_acls_survive_a_restart(broker: EmbeddedBroker) -> None:
    before = cli(broker, "acls", "list").stdout
    assert "DENY User:carol from * READ TOPIC:public (LITERAL)" in before
    broker.restart()
    assert cli(broker, "acls", "list").stdout == before
    assert produce_error(broker, "alice", "pay-in") == 0
    assert produce_error(broker, "bob", "pay-in") == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_bad_acls_are_refused(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL,
                     "User:x", "*", AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as e:
        admin.create_acls([bad])[bad].result(scaled(10))
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST
    done = cli(broker, "acls", "add", "--principal", "alice", "--operation", "READ",
               "--topic", "x")
    assert done.returncode != 0 and "TYPE:NAME" in done.stderr + done.stdout
    done = cli(broker, "acls", "add", "--principal", "User:a", "--operation", "FLY",
               "--topic", "x")
    assert done.returncode != 0 and "unknown operation" in done.stderr + done.stdout


def test_without_an_authorizer_acl_apis_answer_security_disabled() -> None:
    with EmbeddedBroker() as b, RawClient(b.bootstrap_servers) as c:
        r = c.request(DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1), 1)
        assert r.error_code == 54 and r.error_message == "No Authorizer is configured."
        done = cli(b, "acls", "add", "--principal", "User:a", "--operation", "READ",
                   "--topic", "x")
        assert done.returncode != 0 and "No Authorizer is configured" in done.stderr
