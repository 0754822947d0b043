"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it, and PLAIN checked against the same
credentials. Pure functions and a per-connection state machine; no I/O.

A credential keeps only the salt, the iteration count, StoredKey = H(HMAC(SaltedPassword,
"Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"): never the password. A
PLAIN login derives StoredKey from the offered password with the stored salt and compares,
so PLAIN needs no plaintext store either.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

from headrace.errors import HeadraceError

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's ScramMechanism ids (DescribeUserScramCredentials / AlterUserScramCredentials).
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class AuthenticationError(HeadraceError):
    """A SASL exchange failed: bad token, unknown user, wrong password. The message is safe
    to send to the client (it never says which of user and password was wrong)."""


class AuthorizationIdError(AuthenticationError):
    """The client asked to act as someone else (an authzid other than its user name).
    Answered with exactly this message, as Kafka answers it."""

    def __init__(self) -> None:
        super().__init__("Authentication failed: Client requested an authorization id that "
                         "is different from username")


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hmac(key: bytes, msg: bytes, digest: str) -> bytes:
    return hmac.new(key, msg, digest).digest()


def salted_password(password: bytes, salt: bytes, iterations: int, digest: str) -> bytes:
    return hashlib.pbkdf2_hmac(digest, password, salt, iterations)


def from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The stored form of a salted password (what AlterUserScramCredentials carries)."""
    digest = MECHANISMS[mechanism]
    client_key = _hmac(salted, b"Client Key", digest)
    return ScramCredential(mechanism, salt, iterations, hashlib.new(digest, client_key).digest(),
                           _hmac(salted, b"Server Key", digest))


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    salt = salt or os.urandom(32)
    digest = MECHANISMS[mechanism]
    return from_salted(mechanism, salted_password(password.encode(), salt, iterations, digest),
                       salt, iterations)


def password_matches(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (constant time)."""
    fresh = make_credential(credential.mechanism, password, credential.iterations,
                            credential.salt)
    return hmac.compare_digest(fresh.stored_key, credential.stored_key)


def parse_plain(token: bytes) -> tuple[str, str, str]:
    """``(authzid, user, password)`` of a PLAIN token (RFC 4616)."""
    parts = token.split(b"\0")
    if len(parts) != 3 or not parts[1]:
        raise AuthenticationError("malformed PLAIN token")
    try:
        authzid, user, password = (p.decode() for p in parts)
    except UnicodeDecodeError as e:
        raise AuthenticationError("malformed PLAIN token") from e
    if authzid and authzid != user:
        raise AuthorizationIdError()
    return authzid, user, password


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise AuthenticationError("malformed SCRAM message")
        out.setdefault(key, value)
    return out


def _unescape(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationError("malformed SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange on the server side: ``first`` then ``final``. ``lookup(user)``
    returns the user's credential for this mechanism, or None."""

    def __init__(self, mechanism: str, lookup: object) -> None:
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self._lookup = lookup
        self.user = ""
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    def first(self, token: bytes) -> bytes:
        """client-first-message -> server-first-message."""
        try:
            text = token.decode()
        except UnicodeDecodeError as e:
            raise AuthenticationError("malformed SCRAM message") from e
        gs2_cbind, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or gs2_cbind not in ("n", "y"):
            raise AuthenticationError("malformed SCRAM client-first message (channel binding "
                                      "is not supported)")
        if authzid and not authzid.startswith("a="):
            raise AuthenticationError("malformed SCRAM client-first message")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise AuthenticationError("malformed SCRAM client-first message")
        self.user = _unescape(attrs["n"])
        # Kafka refuses this once it found the user; refusing it for every name tells
        # nobody which users exist.
        if authzid and _unescape(authzid[2:]) != self.user:
            raise AuthorizationIdError()
        lookup = self._lookup
        assert callable(lookup)
        credential = lookup(self.user)
        # An unknown user gets a well-formed challenge from a throwaway credential, and
        # fails at the proof, as a wrong password does.
        self._credential = credential or make_credential(self.mechanism, os.urandom(16).hex())
        self._known = credential is not None
        self._gs2 = text[: len(gs2_cbind) + 1 + len(authzid) + 1]
        self._client_first_bare = bare
        self._nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(self._credential.salt).decode()}"
                              f",i={self._credential.iterations}")
        return self._server_first.encode()

    def final(self, token: bytes) -> bytes:
        """client-final-message -> server-final-message; ``AuthenticationError`` when the
        proof is wrong."""
        if self._credential is None:
            raise AuthenticationError("SCRAM final message before the first")
        try:
            text = token.decode()
        except UnicodeDecodeError as e:
            raise AuthenticationError("malformed SCRAM message") from e
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise AuthenticationError("malformed SCRAM client-final message")
        attrs = _attributes(without_proof)
        try:
            binding = base64.b64decode(attrs.get("c", ""), validate=True).decode()
            proof = base64.b64decode(proof_part, validate=True)
        except (ValueError, UnicodeDecodeError) as e:
            raise AuthenticationError("malformed SCRAM client-final message") from e
        if attrs.get("r") != self._nonce or binding != self._gs2:
            raise AuthenticationError("SCRAM nonce or channel binding mismatch")
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 without_proof)).encode()
        cred = self._credential
        signature = _hmac(cred.stored_key, auth_message, self.digest)
        if len(proof) != len(signature):
            raise AuthenticationError("authentication failed: invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        ok = hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), cred.stored_key)
        if not (ok and self._known):
            raise AuthenticationError("authentication failed: invalid credentials")
        server_signature = _hmac(cred.server_key, auth_message, self.digest)
        return b"v=" + base64.b64encode(server_signature)
