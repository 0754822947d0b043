"""Listeners: where the broker accepts connections, and with which security protocol.

Kafka's model: ``listeners=NAME://HOST:PORT,...`` with
``listener.security.protocol.map=NAME:PROTOCOL,...`` (a listener named after a protocol
needs no mapping). Each listener is served at once; Metadata, FindCoordinator and
DescribeCluster advertise the listener a client came in on, so a client that bootstraps on
the TLS port keeps talking TLS.

Served protocols: PLAINTEXT and SSL (TLS 1.2+, the server certificate and key from a PEM
file as Kafka's ``ssl.keystore.type=PEM``; client certificates checked against the PEM
truststore with ``ssl.client.auth=required|requested``; a TLS client's principal is
``User:<subject DN>`` as Kafka's default principal builder makes it, ``User:ANONYMOUS``
without a certificate). The TLS handshake has a deadline (``handshake_timeout_s``): a
client that never finishes it, or a plaintext client on a TLS port, is dropped without
touching other connections. SASL_PLAINTEXT and SASL_SSL listeners authenticate every
connection first (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512: ``headrace.broker.security``).
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Any

from headrace.broker.errors import BrokerConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SERVED = PROTOCOLS
_LISTENER = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:]*):(\d+)$")


@dataclass(frozen=True)
class Listener:
    """One listener; ``port`` 0 binds a free port; ``advertised_host`` defaults to ``host``."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"
    advertised_host: str | None = None

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")


@dataclass(frozen=True)
class SslConfig:
    """Kafka's ``ssl.*`` settings for TLS listeners, PEM files only."""

    keystore_location: str = ""
    """PEM file with the broker's private key and certificate chain."""
    truststore_location: str = ""
    """PEM file of the CA certificates client certificates must chain to."""
    client_auth: str = "none"
    """``none``, ``requested`` (a certificate is checked if sent) or ``required``."""
    handshake_timeout_s: float = 10.0


@dataclass(frozen=True)
class BoundListener:
    """A listener as it runs: what clients on it are told to connect to."""

    name: str
    security_protocol: str
    advertised_host: str
    port: int

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


def parse_listeners(specs: list[str], protocol_map: str = "") -> tuple[Listener, ...]:
    """Listeners from ``NAME://HOST:PORT`` strings and a
    ``NAME:PROTOCOL,...`` map. Raises ``BrokerConfigError`` on anything malformed, an
    unknown or unserved protocol, or two listeners with one name."""
    mapping: dict[str, str] = {}
    for item in (x.strip() for x in protocol_map.split(",") if x.strip()):
        name, sep, proto = item.partition(":")
        if not sep or proto.upper() not in PROTOCOLS:
            raise BrokerConfigError(f"listener.security.protocol.map entry {item!r} is not "
                                    f"NAME:PROTOCOL with PROTOCOL one of {', '.join(PROTOCOLS)}")
        mapping[name.upper()] = proto.upper()
    out: list[Listener] = []
    for spec in specs:
        m = _LISTENER.match(spec.strip())
        if m is None:
            raise BrokerConfigError(f"listener {spec!r} is not NAME://HOST:PORT")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        proto = mapping.get(name, name if name in PROTOCOLS else "")
        if not proto:
            raise BrokerConfigError(f"listener {name} has no security protocol: add "
                                    f"{name}:PROTOCOL to listener.security.protocol.map")
        if proto not in SERVED:
            raise BrokerConfigError(f"listener {name} uses {proto}, which this broker does "
                                    f"not serve yet (served: {', '.join(SERVED)})")
        if port > 65535:
            raise BrokerConfigError(f"listener {name}: port {port} out of range")
        if any(x.name == name for x in out):
            raise BrokerConfigError(f"two listeners are named {name}")
        out.append(Listener(name, host or "0.0.0.0", port, proto))
    return tuple(out)


def server_context(config: SslConfig) -> ssl.SSLContext:
    """The TLS context of the broker's TLS listeners. Raises ``BrokerConfigError`` when a
    file is missing or unreadable."""
    if not config.keystore_location:
        raise BrokerConfigError("a TLS listener needs ssl.keystore.location (a PEM file with "
                                "the broker's private key and certificate)")
    if config.client_auth not in ("none", "requested", "required"):
        raise BrokerConfigError(f"ssl.client.auth must be none, requested or required, not "
                                f"{config.client_auth!r}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(config.keystore_location)
        if config.client_auth != "none":
            if not config.truststore_location:
                raise BrokerConfigError(f"ssl.client.auth={config.client_auth} needs "
                                        "ssl.truststore.location (PEM CA certificates)")
            ctx.load_verify_locations(config.truststore_location)
            ctx.verify_mode = (ssl.CERT_REQUIRED if config.client_auth == "required"
                               else ssl.CERT_OPTIONAL)
    except (OSError, ssl.SSLError) as e:
        raise BrokerConfigError(f"cannot load the TLS key, certificate or CAs: {e}") from e
    return ctx


def principal_of(ssl_object: Any) -> str:
    """``User:<subject DN>`` of a TLS peer's verified certificate (RFC 2253 order, as
    Kafka's default principal builder), ``User:ANONYMOUS`` without one."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert:
        return "User:ANONYMOUS"
    rdns = [f"{k}={v}" for rdn in reversed(cert.get("subject", ())) for k, v in rdn]
    names = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST"}
    return "User:" + ",".join(names.get(k, k) + "=" + v
                              for k, v in (x.split("=", 1) for x in rdns))
