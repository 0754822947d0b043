"""SCRAM credentials, stored hashed in the broker's metadata log (``storage.metadata_log``:
no Kafka request can read or write them), one ``scram`` record per user and mechanism,
replayed when the broker starts. Event loop only.

A record's key is ``MECHANISM:USER``; its value ``{"salt", "iterations", "stored_key",
"server_key"}`` (base64), or null to delete. Replay checks every record as Kafka checks a
new credential, and refuses (logging the record) a known mechanism missing, a user name
that is empty, iterations outside 4096-16384, an empty or oversized salt, keys not of the
digest's length, or anything undecodable.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
from typing import Any

from headrace.broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
)
from headrace.errors import HeadraceError
from headrace.storage.metadata_log import MetadataLog, MetadataRecord

log = logging.getLogger(__name__)

KIND = "scram"
MAX_SALT_BYTES = 1024


class InvalidCredentialRecord(HeadraceError):
    """A stored credential record has the wrong shape; the message says what is wrong."""


def record_key(user: str, mechanism: str) -> str:
    return f"{mechanism}:{user}"


def encode(c: ScramCredential) -> dict[str, Any]:
    b64 = base64.b64encode
    return {"salt": b64(c.salt).decode(), "iterations": c.iterations,
            "stored_key": b64(c.stored_key).decode(), "server_key": b64(c.server_key).decode()}


def decode(key: str, value: Any) -> tuple[str, str, ScramCredential | None]:
    """``(user, mechanism, credential or None for a deletion)`` of a record; raises
    ``InvalidCredentialRecord`` for any record of the wrong shape."""
    mechanism, sep, user = key.partition(":")
    if not sep or mechanism not in MECHANISMS:
        raise InvalidCredentialRecord(f"unknown SCRAM mechanism in key {key!r}")
    if not user:
        raise InvalidCredentialRecord("empty user name")
    if value is None:
        return user, mechanism, None
    if not isinstance(value, dict):
        raise InvalidCredentialRecord("the value is not an object")
    iterations = value.get("iterations")
    if type(iterations) is not int or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidCredentialRecord(
            f"iterations {iterations!r} outside {MIN_ITERATIONS}-{MAX_ITERATIONS}")
    try:
        salt, stored_key, server_key = (base64.b64decode(value[f], validate=True)
                                        for f in ("salt", "stored_key", "server_key"))
    except (KeyError, TypeError, ValueError, binascii.Error) as e:
        raise InvalidCredentialRecord(f"undecodable salt or keys: {e!r}") from e
    if not 0 < len(salt) <= MAX_SALT_BYTES:
        raise InvalidCredentialRecord(f"salt of {len(salt)} bytes")
    digest_size = hashlib.new(MECHANISMS[mechanism]).digest_size
    if len(stored_key) != digest_size or len(server_key) != digest_size:
        raise InvalidCredentialRecord(f"keys of {len(stored_key)} and {len(server_key)} "
                                      f"bytes, not {digest_size}")
    return user, mechanism, ScramCredential(mechanism, salt, iterations, stored_key,
                                            server_key)


def to_record(user: str, mechanism: str, c: ScramCredential | None) -> MetadataRecord:
    """The record of an upsert (or a deletion, None), checked as replay will check it."""
    record = MetadataRecord(KIND, record_key(user, mechanism), None if c is None else encode(c))
    decode(record.key, record.value)  # never store what replay would refuse
    return record


class CredentialStore:
    """Users' SCRAM credentials by (user, mechanism)."""

    def __init__(self, metadata: MetadataLog) -> None:
        self._log = metadata
        self.credentials: dict[tuple[str, str], ScramCredential] = {}

    def load(self) -> None:
        """Replay the credential records; each record of the wrong shape is refused with
        an error naming it, never applied."""
        self._log.replay(KIND, self._replayed)

    def _replayed(self, record: MetadataRecord) -> bool:
        try:
            user, mechanism, credential = decode(record.key, record.value)
        except InvalidCredentialRecord as e:
            log.error("metadata log: refused %s: %s", record.describe(), e)
            return False
        self._apply(user, mechanism, credential)
        return True

    def _apply(self, user: str, mechanism: str, c: ScramCredential | None) -> None:
        if c is None:
            self.credentials.pop((user, mechanism), None)
        else:
            self.credentials[(user, mechanism)] = c

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.credentials.get((user, mechanism))

    def any_for(self, user: str) -> list[ScramCredential]:
        """The user's credentials, every mechanism (PLAIN checks against any)."""
        return [c for (u, _m), c in sorted(self.credentials.items()) if u == user]

    def write(self, changes: list[tuple[str, str, ScramCredential | None]]) -> None:
        """Upsert or delete (None) credentials, durably in one write, then apply."""
        self._log.append([to_record(u, m, c) for u, m, c in changes])
        for user, mechanism, c in changes:
            self._apply(user, mechanism, c)
