"""Record batches (magic v2): header parsing, CRC check, offset rewrite, and building.

A v2 batch on the wire and on disk::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordCount int32 | records...

``batchLength`` counts the bytes after itself. The CRC-32C covers ``attributes`` to the
end, so the broker assigns offsets by rewriting ``baseOffset`` (and the leader epoch)
without touching the CRC or re-encoding anything.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from headrace.protocol.errors import ProtocolError

HEADER_SIZE = 61
# The smallest encodable record: length, attributes, timestamp and offset deltas, key and
# value lengths, header count, one byte each.
MIN_RECORD_SIZE = 7
# Bytes of baseOffset + batchLength: the batchLength is relative to this.
LOG_OVERHEAD = 12
BATCH_LENGTH_OFFSET = 8
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
RECORD_COUNT_OFFSET = 57

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed 61-byte header of a v2 record batch.

    ``last_offset`` is ``base_offset + last_offset_delta``: the offset of the batch's
    last record (records may be missing below it after compaction, never above).
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the batch header at ``pos``. Needs ``HEADER_SIZE`` bytes; checks nothing else.

    Raises ``ProtocolError`` when fewer bytes are available.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise ProtocolError(f"truncated record batch header ({len(buf) - pos} bytes)")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def header_fields(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, ...]:
    """The header at ``pos`` as a plain tuple (``BatchHeader(*fields)`` rebuilds it)."""
    return tuple(_HEADER.unpack_from(buf, pos))


def magic_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The magic byte of the batch (or legacy message set) at ``pos``; -1 when too short."""
    if len(buf) - pos <= MAGIC_OFFSET:
        return -1
    return int(buf[pos + MAGIC_OFFSET])


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of the batch bytes covered by the checksum (attributes to the end)."""
    view = memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]
    return int(crc32c.crc32c(view))


def validate_batches(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Split a producer's record set into v2 batches and check each one.

    Checks: complete framing (the set must end exactly at a batch end), magic 2, a
    positive record count equal to ``lastOffsetDelta + 1`` (as producers write them) and
    the CRC-32C.
    Raises ``ProtocolError`` naming the first failure; nothing is partially accepted.
    """
    headers: list[BatchHeader] = []
    pos = 0
    end = len(buf)
    if end == 0:
        raise ProtocolError("empty record set")
    while pos < end:
        magic = magic_at(buf, pos)
        if magic == -1:
            raise ProtocolError(f"truncated record batch ({end - pos} bytes)")
        if magic != 2:
            raise UnsupportedMagicError(f"record batch magic {magic} not supported (only v2)")
        header = parse_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
            raise ProtocolError("record batch length does not match the record set")
        if header.record_count <= 0 or header.record_count != header.last_offset_delta + 1:
            raise ProtocolError(
                f"inconsistent batch: {header.record_count} records, "
                f"lastOffsetDelta {header.last_offset_delta}")
        if (header.compression == 0
                and header.record_count > (header.size - HEADER_SIZE) // MIN_RECORD_SIZE):
            raise ProtocolError(f"{header.record_count} records cannot fit in "
                                f"{header.size - HEADER_SIZE} bytes")
        if compute_crc(buf, pos, header.size) != header.crc:
            raise CorruptBatchError("record batch CRC-32C mismatch")
        headers.append(header)
        pos += header.size
    return headers


def scan_batches(
    buf: bytes | bytearray | memoryview, check_crc: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete, valid batch from the start of ``buf``.

    Stops (without raising) at the first incomplete or invalid batch: the caller treats
    everything from that position on as a torn or corrupt tail.
    """
    pos = 0
    end = len(buf)
    while end - pos >= HEADER_SIZE:
        if magic_at(buf, pos) != 2:
            return
        header = parse_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
            return
        if header.record_count < 0 or header.last_offset_delta < 0:
            return
        if check_crc and compute_crc(buf, pos, header.size) != header.crc:
            return
        yield pos, header
        pos += header.size


def record_timestamps(batch: bytes) -> list[tuple[int, int]]:
    """``(offset, timestamp)`` of every record of one v2 batch, decompressing it if needed
    (through kafka-python's record reader). Raises ``ProtocolError`` if it cannot be read."""
    # imported here: kafka-python costs ~0.15 CPU s to import, and most importers of this
    # module (every Python worker of a Spark query reading the log) never call this
    from kafka.record.default_records import DefaultRecordBatch

    try:
        return [(r.offset, r.timestamp) for r in DefaultRecordBatch(batch)]
    except Exception as e:  # any codec or framing failure means "unreadable"
        raise ProtocolError(f"cannot decode record batch: {e}") from e


def rewrite_base_offset(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Assign ``base_offset`` and ``partitionLeaderEpoch`` in place; the CRC stays valid."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)
    _LEADER_EPOCH.pack_into(buf, pos + LOG_OVERHEAD, leader_epoch)


class UnsupportedMagicError(ProtocolError):
    """A legacy (magic 0/1) message set: Produce answers INVALID_RECORD, as Kafka 4."""


class CorruptBatchError(ProtocolError):
    """The CRC does not match: answered with CORRUPT_MESSAGE."""


# --- building batches (control records, tests, tools) ------------------------------------


def _varint(value: int) -> bytes:
    zz = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zz & 0x7F
        zz >>= 7
        if zz:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]] | None = None,
) -> bytes:
    """Encode one v2 record (length-prefixed), uncompressed."""
    body = bytearray(b"\x00")  # attributes
    body += _varint(timestamp_delta)
    body += _varint(offset_delta)
    for field in (key, value):
        if field is None:
            body += _varint(-1)
        else:
            body += _varint(len(field)) + field
    hdrs = headers or []
    body += _varint(len(hdrs))
    for name, hvalue in hdrs:
        raw = name.encode()
        body += _varint(len(raw)) + raw
        body += _varint(-1) if hvalue is None else _varint(len(hvalue)) + hvalue
    return _varint(len(body)) + bytes(body)


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    base_offset: int = 0,
    timestamp_ms: int = 0,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Build an uncompressed v2 batch of ``(key, value)`` records with a valid CRC."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    body = b"".join(encode_record(i, 0, k, v) for i, (k, v) in enumerate(records))
    tail = struct.pack(
        ">hiqqqhii",
        attributes,
        len(records) - 1,
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    ) + body
    crc = crc32c.crc32c(tail)
    batch_length = 4 + 1 + 4 + len(tail)
    return struct.pack(">qiibI", base_offset, batch_length, 0, 2, crc) + tail


# --- control batches (transaction markers) ------------------------------------------------

CONTROL_ABORT, CONTROL_COMMIT = 0, 1


def build_control_batch(producer_id: int, producer_epoch: int, committed: bool,
                        coordinator_epoch: int = 0, timestamp_ms: int = 0) -> bytes:
    """A transaction marker: one control record, key ``(version 0, type)``, value
    ``(version 0, coordinator epoch)``, in a transactional control batch."""
    key = struct.pack(">hh", 0, CONTROL_COMMIT if committed else CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch([(key, value)], timestamp_ms=timestamp_ms,
                       attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=-1)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def control_committed(batch: bytes) -> bool | None:
    """For a control batch: True for a COMMIT marker, False for ABORT, None when the
    first record is not a readable marker."""
    marker = control_marker(batch)
    return None if marker is None else marker[0]


def control_marker(batch: bytes) -> tuple[bool, int] | None:
    """For a control batch: (COMMIT?, coordinator epoch) of its marker, or None when the
    first record is not a readable marker (a coordinator epoch it lacks reads as -1)."""
    try:
        pos = HEADER_SIZE
        _, pos = _read_varint(batch, pos)  # record length
        pos += 1  # attributes
        _, pos = _read_varint(batch, pos)  # timestamp delta
        _, pos = _read_varint(batch, pos)  # offset delta
        key_length, pos = _read_varint(batch, pos)
        if key_length < 4:
            return None
        _, kind = struct.unpack_from(">hh", batch, pos)
        pos += key_length
        value_length, pos = _read_varint(batch, pos)
        epoch = struct.unpack_from(">i", batch, pos + 2)[0] if value_length >= 6 else -1
    except (IndexError, struct.error):
        return None
    committed = {CONTROL_COMMIT: True, CONTROL_ABORT: False}.get(kind)
    return None if committed is None else (committed, epoch)
