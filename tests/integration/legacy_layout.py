"""A data directory in the layout before the metadata log: SCRAM credentials and ACLs in
the compacted topics ``__headrace_scram_credentials`` and ``__headrace_acls``, written
through the storage API exactly as that layout's ``InternalTopic`` wrote them (one keyed
record per credential or binding, JSON values, ``b"1"`` for a present binding)."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import asdict
from pathlib import Path

from headrace.broker.security.acls import AclBinding
from headrace.broker.security.scram import ScramCredential
from headrace.protocol.records import build_batch, validate_batches
from headrace.storage.config import LogConfig
from headrace.storage.manager import LogManager

CREDENTIALS_TOPIC = "__headrace_scram_credentials"
ACLS_TOPIC = "__headrace_acls"
Record = tuple[bytes, bytes | None]


def credential_record(user: str, c: ScramCredential) -> Record:
    b64 = base64.b64encode
    return (f"{c.mechanism}\0{user}".encode(), json.dumps({
        "salt": b64(c.salt).decode(), "iterations": c.iterations,
        "stored_key": b64(c.stored_key).decode(),
        "server_key": b64(c.server_key).decode()}).encode())


def acl_record(b: AclBinding, present: bool = True) -> Record:
    return json.dumps(asdict(b), sort_keys=True).encode(), b"1" if present else None


def write_legacy_layout(data_dir: Path, credentials: list[Record], acls: list[Record]) -> None:
    """Create ``data_dir`` holding the two topics with these records, in order."""
    logs = LogManager(data_dir, LogConfig())
    for topic, records in ((CREDENTIALS_TOPIC, credentials), (ACLS_TOPIC, acls)):
        plog = logs.create_topic(topic, 1, {"cleanup.policy": "compact",
                                            "retention.ms": "-1"}).partitions[0]
        for record in records:  # one batch per change, as each admin request wrote one
            data = bytearray(build_batch([record], timestamp_ms=int(time.time() * 1000)))
            plog.append(data, validate_batches(data))
        plog.flush()
    logs.close()
