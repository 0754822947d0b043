"""TLS listeners: a PLAINTEXT and an SSL listener side by side, mutual TLS, Metadata
advertising the listener a client came in on, and misbehaving clients dropped alone."""

from __future__ import annotations

import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.tls_support import Pki


@pytest.fixture(scope="module")
def tls_broker(pki: Pki) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=[
            "--listener", "PLAINTEXT://127.0.0.1:0", "--listener", "SECURE://127.0.0.1:0",
            "--listener-security-protocol-map", "SECURE:SSL",
            "--ssl-keystore-location", str(pki.server),
            "--ssl-truststore-location", str(pki.ca), "--ssl-client-auth", "required",
            # Behaviour (a silent client is dropped after it), but every TLS client of
            # these tests must also finish its handshake within it: scaled.
            "--ssl-handshake-timeout", str(scaled(1.0))]) as b:
        yield b


def tls_config(b: EmbeddedBroker, pki: Pki, **more: Any) -> dict[str, Any]:
    return {"bootstrap.servers": b.listeners["SECURE"], "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key), **more}


def test_librdkafka_round_trip_over_mutual_tls(tls_broker: EmbeddedBroker, pki: Pki) -> None:
    topic = f"tls-{uuid.uuid4().hex[:6]}"
    p = Producer(tls_config(tls_broker, pki))
    for i in range(20):
        p.produce(topic, key=b"k%d" % i, value=b"secret %d" % i)
    assert p.flush(scaled(30)) == 0
    c = Consumer(tls_config(tls_broker, pki, **{"group.id": f"g-{topic}",
                                               "auto.offset.reset": "earliest"}))
    c.subscribe([topic])  # the group coordinator is found through the SSL listener too
    got = []
    deadline = time.monotonic() + scaled(30)
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert sorted(got) == sorted(b"secret %d" % i for i in range(20))
    # Metadata on each listener advertises that listener's port.
    for name, address in (("SECURE", tls_broker.listeners["SECURE"]),
                          ("PLAINTEXT", tls_broker.bootstrap_servers)):
        conf = tls_config(tls_broker, pki) if name == "SECURE" else {
            "bootstrap.servers": address}
        brokers = AdminClient(conf).list_topics(timeout=scaled(10)).brokers
        assert [f"{b.host}:{b.port}" for b in brokers.values()] == [address]


def test_large_fetches_over_tls(tls_broker: EmbeddedBroker, pki: Pki) -> None:
    """Fetches larger than the broker's sendfile(2) threshold (64 KiB) arrive encrypted and
    intact: over TLS the log is never copied to the socket directly."""
    topic = f"tls-big-{uuid.uuid4().hex[:6]}"
    values = [bytes([i % 251]) * 1000 for i in range(2000)]  # 2 MB
    p = Producer(tls_config(tls_broker, pki, **{"linger.ms": 50}))
    for v in values:
        p.produce(topic, v)
    assert p.flush(scaled(30)) == 0
    c = Consumer(tls_config(tls_broker, pki, **{"group.id": f"g-{topic}",
                                               "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + scaled(60)
    while len(got) < len(values) and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
    c.close()
    assert got == values


def test_kafka_python_over_mutual_tls(tls_broker: EmbeddedBroker, pki: Pki) -> None:
    topic = f"tls-kp-{uuid.uuid4().hex[:6]}"
    ssl = {"security_protocol": "SSL", "ssl_cafile": str(pki.ca),
           "ssl_certfile": str(pki.client_cert), "ssl_keyfile": str(pki.client_key),
           "bootstrap_servers": tls_broker.listeners["SECURE"]}
    producer = KafkaProducer(**ssl)
    producer.send(topic, b"over tls").get(timeout=scaled(30))
    producer.close()
    # (Iteration ends after this long without a record: also the wait for the first one.)
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest",
                             consumer_timeout_ms=int(scaled(5000)), **ssl)
    assert [m.value for m in consumer] == [b"over tls"]
    consumer.close()


def test_clients_without_a_trusted_certificate_are_refused(tls_broker: EmbeddedBroker,
                                                           pki: Pki) -> None:
    no_cert = {"bootstrap.servers": tls_broker.listeners["SECURE"], "security.protocol": "SSL",
               "ssl.ca.location": str(pki.ca), "log_level": 0}
    with pytest.raises(KafkaException):
        AdminClient(no_cert).list_topics(timeout=3)
    # A client that does not trust the broker's CA refuses it.
    wrong_ca = tls_config(tls_broker, pki, **{"ssl.ca.location": str(pki.other_ca),
                                             "log_level": 0})
    with pytest.raises(KafkaException):
        AdminClient(wrong_ca).list_topics(timeout=3)


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_plaintext_and_silent_clients_on_the_tls_port_are_dropped(
        tls_broker: EmbeddedBroker, pki: Pki) -> None:
    port = _port(tls_broker.listeners["SECURE"])
    # A Kafka ApiVersions request in plaintext: not a TLS ClientHello.
    body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        assert _closed(s)  # (after a TLS alert, or none)
    # A client that connects and never starts the handshake is dropped after its deadline.
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(5)) as s:
        started = time.monotonic()
        assert _closed(s)
        # Behaviour, not speed: dropped after its (scaled) 1 s deadline, not never.
        assert time.monotonic() - started < scaled(4)
    # Everyone else is still served, on both listeners.
    AdminClient(tls_config(tls_broker, pki)).list_topics(timeout=scaled(10))
    AdminClient({"bootstrap.servers": tls_broker.bootstrap_servers}).list_topics(
        timeout=scaled(10))


def _closed(s: socket.socket) -> bool:
    try:
        while s.recv(4096):
            pass
        return True
    except (ConnectionResetError, TimeoutError):
        return False


def test_bad_tls_settings_fail_at_start(tmp_path: Path, pki: Pki) -> None:
    import subprocess
    import sys

    for args, message in (
            (["--listener", "SSL://127.0.0.1:0"], "needs ssl.keystore.location"),
            (["--listener", "SSL://127.0.0.1:0", "--ssl-keystore-location",
              str(tmp_path / "missing.pem")], "cannot load the TLS key"),
            (["--listener", "SASL_SSL://127.0.0.1:0"], "needs ssl.keystore.location"),
            (["--listener", "X://127.0.0.1:0"], "has no security protocol"),
            (["--listener", "nonsense"], "is not NAME://HOST:PORT")):
        done = subprocess.run([sys.executable, "-m", "headrace", "broker", "--data-dir",
                               str(tmp_path / "d"), *args], capture_output=True, text=True,
                              timeout=scaled(60), env={**os.environ, "COLUMNS": "500"})
        said = " ".join(done.stderr.replace("│", " ").split())
        assert done.returncode == 2 and message in said, (args, said)


def test_committed_offsets_over_tls(tls_broker: EmbeddedBroker, pki: Pki) -> None:
    topic = f"tls-off-{uuid.uuid4().hex[:6]}"
    p = Producer(tls_config(tls_broker, pki))
    p.produce(topic, b"x")
    assert p.flush(scaled(30)) == 0
    c = Consumer(tls_config(tls_broker, pki, **{"group.id": f"g-{topic}"}))
    c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    assert c.committed([TopicPartition(topic, 0)], timeout=scaled(10))[0].offset == 0
    c.close()


def test_aiokafka_over_mutual_tls(tls_broker: EmbeddedBroker, pki: Pki) -> None:
    import asyncio
    import ssl

    from aiokafka import AIOKafkaProducer

    async def send() -> None:
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        producer = AIOKafkaProducer(bootstrap_servers=tls_broker.listeners["SECURE"],
                                    security_protocol="SSL", ssl_context=context)
        await producer.start()
        try:
            await producer.send_and_wait(f"tls-aio-{uuid.uuid4().hex[:6]}", b"hi")
        finally:
            await producer.stop()

    asyncio.run(send())
