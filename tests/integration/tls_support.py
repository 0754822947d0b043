"""A throwaway certificate authority for TLS tests (the ``cryptography`` library)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate (PEM)
    server: Path  # the broker's key + certificate chain (PEM keystore)
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA nobody trusts


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "headrace tests")])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, ca: bool,
          san: list[x509.GeneralName] | None = None) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_pki(directory: Path, client_cn: str = "alice") -> Pki:
    ca_key, other_key = _key(), _key()
    ca = _cert(_name("headrace test CA"), ca_key, _name("headrace test CA"), ca_key, True)
    other = _cert(_name("stranger CA"), other_key, _name("stranger CA"), other_key, True)
    server_key, client_key = _key(), _key()
    server = _cert(_name("localhost"), server_key, ca.subject, ca_key, False,
                   [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client = _cert(_name(client_cn), client_key, ca.subject, ca_key, False)
    pki = Pki(directory / "ca.pem", directory / "server.pem", directory / "client.pem",
              directory / "client.key", directory / "other-ca.pem")
    pki.ca.write_bytes(_pem(ca))
    pki.other_ca.write_bytes(_pem(other))
    pki.server.write_bytes(_key_pem(server_key) + _pem(server) + _pem(ca))
    pki.client_cert.write_bytes(_pem(client))
    pki.client_key.write_bytes(_key_pem(client_key))
    return pki
