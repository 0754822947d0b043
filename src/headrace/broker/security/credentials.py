"""SCRAM credentials, stored hashed in the compacted internal topic
``__headrace_scram_credentials`` (one record per user and mechanism, a tombstone deletes),
replayed when the broker starts. Event loop only."""

from __future__ import annotations

import base64
import json

from headrace.broker.security.internal_topic import InternalTopic
from headrace.broker.security.scram import MECHANISMS, ScramCredential
from headrace.storage.manager import LogManager

CREDENTIALS_TOPIC = "__headrace_scram_credentials"


def _key(user: str, mechanism: str) -> bytes:
    return f"{mechanism}\0{user}".encode()


def _encode(c: ScramCredential) -> bytes:
    b64 = base64.b64encode
    return json.dumps({"salt": b64(c.salt).decode(), "iterations": c.iterations,
                       "stored_key": b64(c.stored_key).decode(),
                       "server_key": b64(c.server_key).decode()}).encode()


class CredentialStore:
    """Users' SCRAM credentials by (user, mechanism)."""

    def __init__(self, logs: LogManager) -> None:
        self._topic = InternalTopic(logs, CREDENTIALS_TOPIC)
        self.credentials: dict[tuple[str, str], ScramCredential] = {}

    def load(self) -> None:
        """Replay the topic; undecodable records are skipped."""
        self._topic.replay(self._apply)

    def _apply(self, key: bytes, value: bytes | None) -> None:
        try:
            mechanism, _, user = key.decode().partition("\0")
            if mechanism not in MECHANISMS:
                return
            if value is None:
                self.credentials.pop((user, mechanism), None)
                return
            doc = json.loads(value)
            b64 = base64.b64decode
            self.credentials[(user, mechanism)] = ScramCredential(
                mechanism, b64(doc["salt"]), int(doc["iterations"]), b64(doc["stored_key"]),
                b64(doc["server_key"]))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.credentials.get((user, mechanism))

    def any_for(self, user: str) -> list[ScramCredential]:
        """The user's credentials, every mechanism (PLAIN checks against any)."""
        return [c for (u, _m), c in sorted(self.credentials.items()) if u == user]

    def write(self, changes: list[tuple[str, str, ScramCredential | None]]) -> None:
        """Upsert or delete (None) credentials, durably in one batch, then apply."""
        self._topic.write([(_key(u, m), None if c is None else _encode(c))
                           for u, m, c in changes], self._apply)
