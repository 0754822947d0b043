"""Hand framing of the Fetch response (versions 0-18), around record sets it never copies.

Every other response goes through the generated codec; Fetch is framed here so that the
stored batches can follow their length prefix straight from the segment file (sendfile).
The output is a list of parts: ``bytes`` for the framing, and each partition's
``records`` object, untouched, where its bytes belong. ``b"".join`` of the parts (with the
records as bytes) equals the codec's encoding of the same response.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from headrace.protocol.request_header import encode_uvarint

FLEXIBLE_FROM = 12
MAX_VERSION = 18
# From v13 a topic is named by its id (16 bytes), not by its name.
TOPIC_ID_FROM = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class FetchPartition:
    """One partition of a Fetch response. ``records`` is opaque: bytes or a file region
    of ``records_length`` bytes; None for a null record set."""

    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: object = None
    records_length: int = 0


@dataclass(slots=True)
class FetchTopic:
    topic: str
    partitions: list[FetchPartition] = field(default_factory=list)
    # Written instead of the name from v13 (the zero UUID when None).
    topic_id: uuid.UUID | None = None


def _array_len(n: int | None, flexible: bool) -> bytes:
    if flexible:
        return encode_uvarint(0 if n is None else n + 1)
    return _I32.pack(-1 if n is None else n)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return (encode_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def encode_fetch_response(
    version: int,
    topics: list[FetchTopic],
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> list[object]:
    """Frame a Fetch response body (no size, no response header) as parts; see module doc."""
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"Fetch response version {version} not framed here (0-{MAX_VERSION})")
    flexible = version >= FLEXIBLE_FROM
    tags = b"\x00" if flexible else b""
    parts: list[object] = []
    buf = bytearray()
    if version >= 1:
        buf += _I32.pack(throttle_time_ms)
    if version >= 7:
        buf += _I16.pack(error_code) + _I32.pack(session_id)
    buf += _array_len(len(topics), flexible)
    for topic in topics:
        if version >= TOPIC_ID_FROM:
            buf += (topic.topic_id or _ZERO_UUID).bytes
        else:
            buf += _string(topic.topic, flexible)
        buf += _array_len(len(topic.partitions), flexible)
        for p in topic.partitions:
            buf += _I32.pack(p.partition_index) + _I16.pack(p.error_code)
            buf += _I64.pack(p.high_watermark)
            if version >= 4:
                buf += _I64.pack(p.last_stable_offset)
            if version >= 5:
                buf += _I64.pack(p.log_start_offset)
            if version >= 4:
                aborted = p.aborted_transactions
                buf += _array_len(None if aborted is None else len(aborted), flexible)
                for producer_id, first_offset in aborted or ():
                    buf += _I64.pack(producer_id) + _I64.pack(first_offset) + tags
            if version >= 11:
                buf += _I32.pack(p.preferred_read_replica)
            if p.records is None:
                buf += _array_len(None, flexible)
            else:
                buf += _array_len(p.records_length, flexible)
                if p.records_length:
                    parts.append(bytes(buf))
                    buf = bytearray()
                    parts.append(p.records)
            buf += tags
        buf += tags
    buf += tags
    parts.append(bytes(buf))
    return parts
