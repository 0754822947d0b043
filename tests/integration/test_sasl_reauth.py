"""KIP-368 re-authentication (``--connections-max-reauth-ms``): logins expire, clients that
re-authenticate on their connection keep it, the others are disconnected at their next
request, and a re-authentication may not change who the connection is."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.rawclient import RawClient

# The login lifetime. Behaviour (logins expire after it), but also a bound the machine must
# beat: each re-authentication (librdkafka's near its end, the tests' at 0.6 of it) has to
# arrive in time. So it is scaled, and so is every wait derived from it.
LIFETIME_MS = int(scaled(2000))


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=[
            "--listener", "PLAINTEXT://127.0.0.1:0", "--listener", "SASL_PLAINTEXT://127.0.0.1:0",
            "--connections-max-reauth-ms", str(LIFETIME_MS)]) as b:
        for user in ("alice", "bob"):
            done = subprocess.run(
                [sys.executable, "-m", "headrace", "users", "add", user, "-b",
                 b.bootstrap_servers], capture_output=True, text=True, timeout=scaled(60),
                env={**os.environ, "HEADRACE_USER_PASSWORD": f"{user}-pw"})
            assert done.returncode == 0, done.stderr
        yield b


def plain_login(c: RawClient, user: str, version: int = 2) -> int:
    """Log in (or again) with PLAIN; the session lifetime answered."""
    assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    r = c.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{user}-pw".encode()), version)
    assert r.error_code == 0, r
    return int(r.session_lifetime_ms)


def metadata(c: RawClient) -> None:
    c.request(MetadataRequest(topics=[]), 1)


def test_expired_logins_are_disconnected(broker: EmbeddedBroker) -> None:
    with RawClient(broker.listeners["SASL_PLAINTEXT"]) as c:
        assert plain_login(c, "alice") == LIFETIME_MS
        metadata(c)
        time.sleep(LIFETIME_MS / 1000 + 0.5)
        with pytest.raises(ConnectionError):
            metadata(c)


def test_reauthentication_keeps_the_connection(broker: EmbeddedBroker) -> None:
    with RawClient(broker.listeners["SASL_PLAINTEXT"]) as c:
        plain_login(c, "alice")
        for _ in range(3):  # 3 x 1.2 s: well past the first login's lifetime
            time.sleep(LIFETIME_MS / 1000 * 0.6)
            assert plain_login(c, "alice") == LIFETIME_MS
            metadata(c)


def test_reauthentication_cannot_change_the_principal(broker: EmbeddedBroker) -> None:
    with RawClient(broker.listeners["SASL_PLAINTEXT"]) as c:
        plain_login(c, "alice")
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        r = c.request(SaslAuthenticateRequest(auth_bytes=b"\0bob\0bob-pw"), 2)
        assert r.error_code == 58 and "re-authentication as User:bob" in r.error_message
        assert c.is_closed_by_peer()


def test_v0_logins_get_no_lifetime(broker: EmbeddedBroker) -> None:
    """SaslAuthenticate v0 cannot carry a lifetime: the login lasts (as Kafka, which
    re-authenticates only v1+ clients)."""
    with RawClient(broker.listeners["SASL_PLAINTEXT"]) as c:
        assert plain_login(c, "alice", version=0) == 0
        time.sleep(LIFETIME_MS / 1000 + 0.5)
        metadata(c)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_librdkafka_reauthenticates(broker: EmbeddedBroker, mechanism: str) -> None:
    """librdkafka re-authenticates in time (KIP-368): a producer sending for three
    lifetimes delivers everything over the one connection it opened."""
    errors: list[object] = []
    p = Producer({"bootstrap.servers": broker.listeners["SASL_PLAINTEXT"],
                  "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                  "sasl.username": "bob", "sasl.password": "bob-pw"})
    deadline = time.monotonic() + 3 * LIFETIME_MS / 1000
    while time.monotonic() < deadline:
        p.produce("reauth", b"x", on_delivery=lambda e, _m: errors.append(e))
        p.poll(0.2)
    assert p.flush(scaled(30)) == 0
    assert not [e for e in errors if e is not None]
    expired = [ln for ln in broker.output_lines() if "User:bob expired" in ln]
    assert not expired, expired
