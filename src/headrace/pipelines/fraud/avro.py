"""Transactions as Avro through a schema registry (Confluent's wire format).

The generator encodes each well-formed transaction with ``TRANSACTION_SCHEMA`` under the
subject ``<topic>-value`` (Confluent's TopicNameStrategy, so any Confluent deserializer
reads the topic); the injected malformed records stay the raw bytes they are, and become
dead letters as before. Every field is a nullable union: a record missing a required field
is still encoded, and the pipelines judge it (their schemas say which fields are required).
The micro-batch pipeline decodes with the writer's schema from the registry
(``read_events(schema_registry_url=...)``); the real-time path decodes in the JVM with
Spark's ``from_avro``, only records of the schema id it was started with (``header``).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import fastavro

_FIELDS = (("txn_id", "string"), ("card_id", "string"), ("user_id", "string"),
           ("merchant_id", "string"), ("amount", "double"), ("currency", "string"),
           ("lat", "double"), ("lon", "double"), ("city", "string"), ("country", "string"),
           ("category", "string"), ("event_time", "long"))

TRANSACTION_SCHEMA = json.dumps({
    "type": "record", "name": "Transaction", "namespace": "headrace.fraud",
    "doc": "A card payment as the fraud demo's generator emits it (event_time: epoch ms).",
    "fields": [{"name": name, "type": ["null", kind], "default": None}
               for name, kind in _FIELDS]})


def header(schema_id: int) -> bytes:
    """The 5 bytes before each payload: magic byte 0, the schema id big-endian."""
    return b"\x00" + schema_id.to_bytes(4, "big")


@dataclass
class TransactionEncoder:
    """Encodes generator JSON into the wire format of ``schema_id`` (see ``register``)."""

    schema_id: int
    _parsed: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._parsed = fastavro.parse_schema(json.loads(TRANSACTION_SCHEMA))
        self._header = header(self.schema_id)

    def encode(self, value: bytes) -> bytes:
        """The record in the wire format; the bytes unchanged when they are not a transaction
        record Avro can carry (not JSON, not an object, a field of the wrong type)."""
        try:
            record = json.loads(value)
        except ValueError:
            return value
        if not isinstance(record, dict) or not fastavro.validate(record, self._parsed,
                                                                 raise_errors=False):
            return value
        out = io.BytesIO(self._header)
        out.seek(5)
        fastavro.schemaless_writer(out, self._parsed, record)
        return out.getvalue()


def register(registry_url: str, topic: str) -> TransactionEncoder:
    """Register ``TRANSACTION_SCHEMA`` for ``topic``'s values (idempotent). Blocks on HTTP."""
    from headrace.registry.client import RegistryClient

    client = RegistryClient(registry_url)
    try:
        registered = client.register(f"{topic}-value", TRANSACTION_SCHEMA)
    finally:
        client.close()
    return TransactionEncoder(int(registered["id"]))
