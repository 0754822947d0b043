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
without a certificate). Client authentication per listener as Kafka (KIP-684): the
broker-wide ``ssl.client.auth`` applies to SSL listeners only; a listener's own setting,
``listener.name.<name>.ssl.client.auth`` (a broker config) or
``NAME://HOST:PORT?ssl.client.auth=VALUE`` (its spec), overrides it, for SSL and SASL_SSL
listeners alike. The TLS handshake has a deadline (``handshake_timeout_s``): a
client that never finishes it, or a plaintext client on a TLS port, is dropped without
touching other connections. SASL_PLAINTEXT and SASL_SSL listeners authenticate every
connection first (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512: ``headrace.broker.security``).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from headrace.broker.errors import BrokerConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SERVED = PROTOCOLS
_LISTENER = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:]*):(\d+)(?:\?(.*))?$")
CLIENT_AUTH_VALUES = ("none", "requested", "required")
_LISTENER_CLIENT_AUTH = re.compile(r"^listener\.name\.([A-Za-z][A-Za-z0-9_]*)\.ssl\.client\.auth$")


@dataclass(frozen=True)
class Listener:
    """One listener; ``port`` 0 binds a free port; ``advertised_host`` defaults to ``host``;
    ``ssl_client_auth``: this listener's own ``ssl.client.auth`` (None: see
    ``client_auth``)."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"
    advertised_host: str | None = None
    ssl_client_auth: str | None = None

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def client_auth(self, broker_wide: str) -> str:
        """KIP-684: this listener's own setting, else the broker-wide one on SSL
        listeners, else ``none`` (a SASL_SSL listener authenticates by SASL)."""
        if self.ssl_client_auth is not None:
            return self.ssl_client_auth
        return broker_wide if self.security_protocol == "SSL" else "none"


@dataclass(frozen=True)
class SslConfig:
    """Kafka's ``ssl.*`` settings for TLS listeners, PEM files only."""

    keystore_location: str = ""
    """PEM file with the broker's private key and certificate chain."""
    truststore_location: str = ""
    """PEM file of the CA certificates client certificates must chain to."""
    client_auth: str = "none"
    """``none``, ``requested`` (a certificate is checked if sent) or ``required``: the
    broker-wide default, for SSL listeners only (``Listener.client_auth``)."""
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


def listener_client_auth(configs: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Split broker configs into ``listener.name.<name>.ssl.client.auth`` settings (listener
    name upper-cased -> value) and the rest."""
    auth: dict[str, str] = {}
    rest: dict[str, str] = {}
    for name, value in configs.items():
        m = _LISTENER_CLIENT_AUTH.match(name)
        if m is None:
            rest[name] = value
        else:
            auth[m.group(1).upper()] = value
    return auth, rest


def _check_client_auth(listener: str, value: str) -> str:
    if value not in CLIENT_AUTH_VALUES:
        raise BrokerConfigError(f"listener {listener}: ssl.client.auth must be none, "
                                f"requested or required, not {value!r}")
    return value


def _spec_options(name: str, query: str | None) -> str | None:
    """The listener's ``ssl.client.auth`` from its spec's ``?key=value&...`` options."""
    client_auth = None
    for item in (query or "").split("&"):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or key != "ssl.client.auth":
            raise BrokerConfigError(f"listener {name}: unknown option {item!r} "
                                    "(ssl.client.auth=none|requested|required)")
        client_auth = _check_client_auth(name, value)
    return client_auth


def parse_listeners(specs: list[str], protocol_map: str = "",
                    client_auth: Mapping[str, str] | None = None) -> tuple[Listener, ...]:
    """Listeners from ``NAME://HOST:PORT[?ssl.client.auth=VALUE]`` strings, a
    ``NAME:PROTOCOL,...`` map and per-listener client auth settings (listener name ->
    value, from ``listener.name.<name>.ssl.client.auth``; the spec's own option wins).
    Raises ``BrokerConfigError`` on anything malformed, an unknown or unserved protocol,
    two listeners with one name, or a client auth setting for a listener that does not
    exist or does not use TLS."""
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
        own_auth = _spec_options(name, m.group(4))
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
        if own_auth is None and name in (client_auth or {}):
            own_auth = _check_client_auth(name, (client_auth or {})[name])
        if own_auth is not None and proto not in ("SSL", "SASL_SSL"):
            raise BrokerConfigError(f"listener {name} uses {proto}: ssl.client.auth applies "
                                    "to SSL and SASL_SSL listeners only")
        out.append(Listener(name, host or "0.0.0.0", port, proto, ssl_client_auth=own_auth))
    unknown = sorted(set(client_auth or {}) - {x.name for x in out})
    if unknown:
        raise BrokerConfigError(f"listener.name.{unknown[0].lower()}.ssl.client.auth names "
                                "no listener")
    return tuple(out)


def server_context(config: SslConfig, client_auth: str | None = None) -> ssl.SSLContext:
    """The TLS context of a TLS listener that checks client certificates as
    ``client_auth`` says (default: the broker-wide ``config.client_auth``). Raises
    ``BrokerConfigError`` when a file is missing or unreadable."""
    if not config.keystore_location:
        raise BrokerConfigError("a TLS listener needs ssl.keystore.location (a PEM file with "
                                "the broker's private key and certificate)")
    client_auth = config.client_auth if client_auth is None else client_auth
    if client_auth not in CLIENT_AUTH_VALUES:
        raise BrokerConfigError(f"ssl.client.auth must be none, requested or required, not "
                                f"{client_auth!r}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(config.keystore_location)
        if client_auth != "none":
            if not config.truststore_location:
                raise BrokerConfigError(f"ssl.client.auth={client_auth} needs "
                                        "ssl.truststore.location (PEM CA certificates)")
            ctx.load_verify_locations(config.truststore_location)
            ctx.verify_mode = (ssl.CERT_REQUIRED if client_auth == "required"
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
