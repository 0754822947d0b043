"""SASL listeners: PLAIN and SCRAM-SHA-256/512 logins over SASL_PLAINTEXT and SASL_SSL,
SCRAM users managed through the Admin API (``headrace users``), and every way a login can
go wrong answered as Kafka does while the broker keeps serving others."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.rawclient import RawClient
from tests.integration.tls_support import Pki


def users(b: EmbeddedBroker, *args: str, password: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headrace", "users", *args, "-b",
                           b.bootstrap_servers], capture_output=True, text=True, timeout=scaled(60),
                          env={**os.environ, "HEADRACE_USER_PASSWORD": password,
                               "COLUMNS": "200"})


@pytest.fixture(scope="module")
def sasl_broker(pki: Pki) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=[
            "--listener", "PLAINTEXT://127.0.0.1:0", "--listener", "SASL_PLAINTEXT://127.0.0.1:0",
            "--listener", "SECURE://127.0.0.1:0",
            "--listener-security-protocol-map", "SECURE:SASL_SSL",
            "--ssl-keystore-location", str(pki.server)]) as b:
        for name, password in (("alice", "alice-secret"), ("bob", "bob-secret")):
            done = users(b, "add", name, password=password)
            assert done.returncode == 0, done.stderr
        yield b


def sasl(b: EmbeddedBroker, mechanism: str, user: str = "alice", password: str = "alice-secret",
         tls: Pki | None = None, **more: Any) -> dict[str, Any]:
    conf = {"bootstrap.servers": b.listeners["SECURE" if tls else "SASL_PLAINTEXT"],
            "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            **more}
    if tls:
        conf["ssl.ca.location"] = str(tls.ca)
    return conf


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_librdkafka_logs_in_and_produces(sasl_broker: EmbeddedBroker, mechanism: str) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:6]}"
    p = Producer(sasl(sasl_broker, mechanism))
    p.produce(topic, b"hello")
    assert p.flush(scaled(30)) == 0
    brokers = AdminClient(sasl(sasl_broker, mechanism)).list_topics(timeout=scaled(10)).brokers
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [
        sasl_broker.listeners["SASL_PLAINTEXT"]]


def test_scram_over_tls(sasl_broker: EmbeddedBroker, pki: Pki) -> None:
    p = Producer(sasl(sasl_broker, "SCRAM-SHA-512", "bob", "bob-secret", tls=pki))
    p.produce(f"sasl-tls-{uuid.uuid4().hex[:6]}", b"hello")
    assert p.flush(scaled(30)) == 0


def test_kafka_python_scram(sasl_broker: EmbeddedBroker) -> None:
    producer = KafkaProducer(bootstrap_servers=sasl_broker.listeners["SASL_PLAINTEXT"],
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                             sasl_plain_username="bob", sasl_plain_password="bob-secret")
    producer.send(f"sasl-kp-{uuid.uuid4().hex[:6]}", b"hi").get(timeout=scaled(30))
    producer.close()


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "wrong"), ("SCRAM-SHA-256", "alice", "wrong"),
    ("SCRAM-SHA-512", "mallory", "alice-secret"), ("PLAIN", "mallory", "x")])
def test_bad_logins_are_refused(sasl_broker: EmbeddedBroker, mechanism: str, user: str,
                                password: str) -> None:
    errors: list[Any] = []
    producer = Producer(sasl(sasl_broker, mechanism, user, password, log_level=0,
                             error_cb=errors.append))
    deadline = time.monotonic() + scaled(10)
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Authentication failed" in errors[0].str()
    # ... and the broker serves everyone else.
    AdminClient(sasl(sasl_broker, "SCRAM-SHA-256")).list_topics(timeout=scaled(10))


def test_protocol_level_refusals(sasl_broker: EmbeddedBroker) -> None:
    address = sasl_broker.listeners["SASL_PLAINTEXT"]
    with RawClient(address) as c:  # an unknown mechanism: the list of ours
        r = c.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert r.error_code == 33 and r.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    # A request before authenticating: closed, unanswered.
    with RawClient(address) as c, pytest.raises(ConnectionError, match="closed the connection"):
        c.request(MetadataRequest(topics=[]), 1)
    with RawClient(address) as c:  # a malformed SCRAM token: refused, then closed
        assert c.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1).error_code == 0
        r = c.request(SaslAuthenticateRequest(auth_bytes=b"\xff garbage"), 1)
        assert r.error_code == 58 and "malformed" in r.error_message
        assert c.is_closed_by_peer()
    with RawClient(sasl_broker.bootstrap_servers) as c:  # no SASL on PLAINTEXT listeners
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 34


def test_users_are_managed_through_the_admin_api(sasl_broker: EmbeddedBroker) -> None:
    listed = users(sasl_broker, "list")
    assert "alice: SCRAM-SHA-256 (8192 iterations), SCRAM-SHA-512 (8192 iterations)" \
        in listed.stdout, listed.stderr
    assert users(sasl_broker, "add", "carol", "--mechanism", "SCRAM-SHA-256",
                 password="c-pass").returncode == 0
    AdminClient(sasl(sasl_broker, "SCRAM-SHA-256", "carol", "c-pass")).list_topics(
        timeout=scaled(10))
    AdminClient(sasl(sasl_broker, "PLAIN", "carol", "c-pass")).list_topics(timeout=scaled(10))
    deleted = users(sasl_broker, "delete", "carol")
    assert deleted.returncode == 0 and "deleted carol (SCRAM-SHA-256)" in deleted.stdout
    with pytest.raises(KafkaException):
        AdminClient(sasl(sasl_broker, "SCRAM-SHA-256", "carol", "c-pass",
                         log_level=0)).list_topics(timeout=3)
    missing = users(sasl_broker, "delete", "nobody", "--mechanism", "SCRAM-SHA-512")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    # Credentials are stored hashed: the password appears nowhere in the broker's data.
    data = b"".join(p.read_bytes() for p in sasl_broker.data_dir.rglob("*") if p.is_file())
    assert b"alice-secret" not in data and b"c-pass" not in data


def test_credentials_survive_a_restart(sasl_broker: EmbeddedBroker) -> None:
    sasl_broker.restart()
    AdminClient(sasl(sasl_broker, "SCRAM-SHA-512")).list_topics(timeout=scaled(10))


def test_aiokafka_scram_over_tls(sasl_broker: EmbeddedBroker, pki: Pki) -> None:
    import asyncio
    import ssl

    from aiokafka import AIOKafkaProducer

    async def send() -> None:
        context = ssl.create_default_context(cafile=str(pki.ca))
        producer = AIOKafkaProducer(
            bootstrap_servers=sasl_broker.listeners["SECURE"], security_protocol="SASL_SSL",
            ssl_context=context, sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
            sasl_plain_password="alice-secret")
        await producer.start()
        try:
            await producer.send_and_wait(f"sasl-aio-{uuid.uuid4().hex[:6]}", b"hi")
        finally:
            await producer.stop()

    asyncio.run(send())
