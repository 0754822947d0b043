"""The secured pair of the differential suite: an Apache Kafka with its StandardAuthorizer
and SASL PLAIN users, and a headrace broker with ``--authorizer`` and the same users and
ACLs (created through the Admin API by the operator on PLAINTEXT, a super user on both).
Started once per session (``conftest``: ``kafka_secured``, ``headrace_secured``) for the
modules that compare ACL decisions."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from headrace.testing import ApacheKafka, EmbeddedBroker, free_port, scaled
from tests.differential.conftest import KAFKA_CONFIGS
from tests.integration.rawclient import RawClient

# mallory holds every grant on topics, groups and transactional ids (not the cluster):
# the attacker of test_internal_topics.
USERS = {"alice": "alice-pw", "bob": "bob-pw", "dave": "dave-pw", "mallory": "mallory-pw"}
SUFFIX = uuid.uuid4().hex[:6]
PAY, SECRET, GROUP = f"pay-{SUFFIX}", f"secret-{SUFFIX}", f"bob-{SUFFIX}"


@dataclass(frozen=True)
class Secured:
    """A broker's operator address (PLAINTEXT, super user) and users' (SASL_PLAINTEXT)."""

    operator: str
    users: str


def acls() -> list[AclBinding]:
    L, P = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    allow = AclPermissionType.ALLOW

    def b(rtype: ResourceType, name: str, pattern: ResourcePatternType, principal: str,
          op: AclOperation, permission: AclPermissionType = allow) -> AclBinding:
        return AclBinding(rtype, name, pattern, principal, "*", op, permission)
    return [
        b(ResourceType.TOPIC, "pay-", P, "User:alice", AclOperation.WRITE),
        b(ResourceType.TOPIC, "pay-", P, "User:alice", AclOperation.CREATE),
        b(ResourceType.TRANSACTIONAL_ID, f"alice-tx-{SUFFIX}", L, "User:alice",
          AclOperation.WRITE),
        b(ResourceType.TOPIC, PAY, L, "User:bob", AclOperation.READ),
        b(ResourceType.GROUP, "bob-", P, "User:bob", AclOperation.READ),
        b(ResourceType.TOPIC, PAY, L, "User:dave", AclOperation.READ,
          AclPermissionType.DENY),
        b(ResourceType.TOPIC, "*", L, "User:dave", AclOperation.DESCRIBE),
        b(ResourceType.BROKER, "kafka-cluster", L, "User:dave", AclOperation.IDEMPOTENT_WRITE),
        b(ResourceType.BROKER, "kafka-cluster", L, "User:dave", AclOperation.DESCRIBE),
        *(b(ResourceType.TOPIC, "*", L, "User:mallory", op)
          for op in (AclOperation.ALL, AclOperation.READ, AclOperation.WRITE)),
        b(ResourceType.TOPIC, "__", P, "User:mallory", AclOperation.ALL),
        b(ResourceType.GROUP, "*", L, "User:mallory", AclOperation.ALL),
        b(ResourceType.TRANSACTIONAL_ID, "*", L, "User:mallory", AclOperation.ALL),
    ]


def prepare(s: Secured) -> None:
    admin = AdminClient({"bootstrap.servers": s.operator})
    for f in admin.create_topics([NewTopic(PAY, 1, 1), NewTopic(SECRET, 1, 1)]).values():
        f.result(scaled(30))
    for f in admin.create_acls(acls()).values():
        f.result(scaled(30))
    p = Producer({"bootstrap.servers": s.operator})
    p.produce(PAY, b"seed")
    p.produce(SECRET, b"seed")
    assert p.flush(scaled(30)) == 0
    time.sleep(scaled(2))  # Kafka applies new ACLs through its metadata log (its pace)


@contextmanager
def kafka_secured() -> Iterator[Secured]:
    k = ApacheKafka(configs=KAFKA_CONFIGS)
    sasl_port = free_port(k.host)
    jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
        f'user_{u}="{p}"' for u, p in USERS.items()) + ";"
    k.configs.update({
        "listeners": f"PLAINTEXT://{k.host}:{k.port},CONTROLLER://{k.host}:{k.controller_port},"
                     f"SASL_PLAINTEXT://{k.host}:{sasl_port}",
        "advertised.listeners": f"PLAINTEXT://{k.host}:{k.port},"
                                f"SASL_PLAINTEXT://{k.host}:{sasl_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    })
    with k:
        s = Secured(k.bootstrap_servers, f"{k.host}:{sasl_port}")
        prepare(s)
        yield s


@contextmanager
def headrace_secured() -> Iterator[Secured]:
    with EmbeddedBroker(extra_args=[
            "--no-auto-create-topics", "--listener", "PLAINTEXT://127.0.0.1:0",
            "--listener", "SASL_PLAINTEXT://127.0.0.1:0", "--authorizer",
            "--super-users", "User:ANONYMOUS"]) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        for f in admin.alter_user_scram_credentials([
                UserScramCredentialUpsertion(u, ScramCredentialInfo(m, 4096), p.encode())
                for u, p in USERS.items()
                for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]).values():
            f.result(scaled(30))
        s = Secured(b.bootstrap_servers, b.listeners["SASL_PLAINTEXT"])
        prepare(s)
        yield s


def login(address: str, user: str) -> RawClient:
    c = RawClient(address)
    assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    r = c.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{USERS[user]}".encode()), 2)
    assert r.error_code == 0, r
    return c
