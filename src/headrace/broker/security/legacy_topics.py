"""Migration from the layout that kept SCRAM credentials and ACLs in the compacted topics
``__headrace_scram_credentials`` and ``__headrace_acls`` (which a client with WRITE on
``*`` could forge and one with READ could dump) to the broker's metadata log.

``migrate`` runs in ``BrokerState.open``, before the stores load. On the first start with
a metadata log (its file does not exist yet) it reads the legacy topics' latest record of
each key, checks each as the metadata log's replay does (a record of the wrong shape is
logged and left behind, never carried over), and creates the metadata log holding them,
atomically. Then, on that start or any later one, it deletes the legacy topics: their
names are reserved (``internal_topics``), so no client can create them again, and a crash
between the two steps finds the log written and only deletes. Blocking; start-up only.
"""

from __future__ import annotations

import json
import logging

from kafka.record.default_records import DefaultRecordBatch

from headrace.broker.security import acls, credentials
from headrace.errors import HeadraceError
from headrace.storage.manager import LogManager
from headrace.storage.metadata_log import MetadataLog, MetadataRecord

log = logging.getLogger(__name__)

LEGACY_CREDENTIALS_TOPIC = "__headrace_scram_credentials"
LEGACY_ACLS_TOPIC = "__headrace_acls"
LEGACY_TOPICS = (LEGACY_CREDENTIALS_TOPIC, LEGACY_ACLS_TOPIC)


def _latest(logs: LogManager, topic: str) -> dict[bytes, tuple[int, bytes | None]]:
    """Key -> (offset, value) of the topic's latest record per key (None: a tombstone)."""
    found: dict[bytes, tuple[int, bytes | None]] = {}
    t = logs.topics.get(topic)
    for plog in (t.partitions if t is not None else []):
        for raw in plog.batches():
            for record in DefaultRecordBatch(raw):
                if record.key is not None:
                    found[bytes(record.key)] = (record.offset, None if record.value is None
                                                else bytes(record.value))
    return found


def _credential(key: bytes, value: bytes) -> MetadataRecord:
    mechanism, sep, user = key.decode().partition("\0")
    if not sep:
        raise credentials.InvalidCredentialRecord("key is not MECHANISM NUL USER")
    try:
        doc = json.loads(value)
    except ValueError as e:
        raise credentials.InvalidCredentialRecord(f"undecodable value: {e}") from e
    user, mechanism, c = credentials.decode(credentials.record_key(user, mechanism), doc)
    return credentials.to_record(user, mechanism, c)


def _acl(key: bytes, value: bytes) -> MetadataRecord:
    binding, _ = acls.decode(key.decode(), True)
    return MetadataRecord(acls.KIND, acls.record_key(binding), True)


def legacy_records(logs: LogManager) -> list[MetadataRecord]:
    """The legacy topics' live credentials and ACLs as metadata records, each checked;
    refused ones are logged with their topic, offset and key."""
    out: list[MetadataRecord] = []
    for topic, convert in ((LEGACY_CREDENTIALS_TOPIC, _credential), (LEGACY_ACLS_TOPIC, _acl)):
        for key, (offset, value) in _latest(logs, topic).items():
            if value is None:
                continue
            try:
                out.append(convert(key, value))
            except (HeadraceError, UnicodeDecodeError) as e:
                log.error("migration: refused the record at offset %d of %s (key %r): %s",
                          offset, topic, key, e)
    return out


def migrate(logs: LogManager, metadata: MetadataLog) -> None:
    """Carry the legacy topics over into a new metadata log, then delete them (see the
    module docstring). Idempotent."""
    if not metadata.exists:
        records = legacy_records(logs)
        metadata.initialize(records)
        if records:
            log.warning("migrated %d SCRAM credentials and ACLs from %s into the metadata "
                        "log %s", len(records), " and ".join(LEGACY_TOPICS), metadata.path)
    for topic in LEGACY_TOPICS:
        if topic in logs.topics:
            logs.delete_topic(topic)
            log.warning("deleted the legacy topic %s (its records live in the metadata "
                        "log now)", topic)
