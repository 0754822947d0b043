"""SCRAM credentials, stored hashed in the compacted internal topic
``__headrace_scram_credentials`` (one record per user and mechanism, a tombstone deletes),
replayed when the broker starts. Event loop only."""

from __future__ import annotations

import base64
import json
import time

from kafka.record.default_records import DefaultRecordBatch

from headrace.broker.security.scram import MECHANISMS, ScramCredential
from headrace.protocol.records import build_batch, validate_batches
from headrace.storage.log import PartitionLog
from headrace.storage.manager import LogManager

CREDENTIALS_TOPIC = "__headrace_scram_credentials"
TOPIC_CONFIG = {"cleanup.policy": "compact", "retention.ms": "-1"}


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
        self._logs = logs
        self.credentials: dict[tuple[str, str], ScramCredential] = {}

    def _log(self, create: bool) -> PartitionLog | None:
        """The topic's partition; created on the first write (a broker without SCRAM users
        has no such topic)."""
        topic = self._logs.topics.get(CREDENTIALS_TOPIC)
        if topic is None and create:
            topic = self._logs.create_topic(CREDENTIALS_TOPIC, 1, TOPIC_CONFIG)
        return None if topic is None else topic.partitions[0]

    def load(self) -> None:
        """Replay the topic; undecodable records are skipped."""
        plog = self._log(create=False)
        if plog is None:
            return
        for raw in plog.batches():
            for record in DefaultRecordBatch(raw):
                if record.key is not None:
                    self._apply(record.key, record.value)

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
        records = [(_key(u, m), None if c is None else _encode(c)) for u, m, c in changes]
        data = bytearray(build_batch(records, timestamp_ms=int(time.time() * 1000)))
        plog = self._log(create=True)
        assert plog is not None
        plog.append(data, validate_batches(data))
        plog.flush()
        for key, value in records:
            self._apply(key, value)
