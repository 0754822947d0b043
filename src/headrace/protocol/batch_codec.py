"""The records inside v2 batches: decompress, parse, and build batches around them.

Used by produce-time validation (null keys in compacted topics, LogAppendTime) and by
the log cleaner, which keeps the surviving records of a batch byte for byte: a record's
offset and timestamp are deltas from its batch's base offset and base timestamp, so a
rebuilt batch with the original base offset needs no re-encoding of its records unless
its base timestamp changes (the delete horizon of KIP-534). No I/O.

A v2 record::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint | headers
"""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import NamedTuple

import crc32c
from kafka.codec import (
    gzip_decode,
    gzip_encode,
    lz4_decode,
    lz4_encode,
    snappy_decode,
    snappy_encode,
    zstd_decode,
    zstd_encode,
)

from headrace.protocol.errors import ProtocolError
from headrace.protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    compute_crc,
)
from headrace.protocol.request_header import encode_uvarint

# KIP-534: the batch's baseTimestamp holds the time after which its tombstones and
# transaction markers may be removed by the cleaner.
DELETE_HORIZON_FLAG = 0x40
GZIP_LEVEL = 6
_MAX_TIMESTAMP_OFFSET = 35
_HEAD = struct.Struct(">qiibI")
_TAIL = struct.Struct(">hiqqqhii")


class RecordView(NamedTuple):
    """Where one record sits in a records buffer, and the fields the cleaner needs (a
    named tuple: the cleaner makes millions of them)."""

    start: int  # the length varint
    body: int  # the attributes byte
    ts_end: int  # the byte after the timestamp delta
    end: int  # one past the record
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    has_value: bool


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """The records section of a batch compressed with ``codec`` (0-4), decompressed."""
    try:
        if codec == 0:
            return bytes(data)
        if codec == 1:
            return bytes(gzip_decode(bytes(data)))
        if codec == 2:
            return bytes(snappy_decode(bytes(data)))
        if codec == 3:
            return bytes(lz4_decode(bytes(data)))
        if codec == 4:
            return bytes(zstd_decode(bytes(data)))
    except Exception as e:  # any codec failure means "unreadable"
        raise ProtocolError(f"cannot decompress records (codec {codec}): {e}") from e
    raise ProtocolError(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    """``data`` compressed with ``codec`` as Kafka clients do (snappy: xerial framing,
    lz4: frame format)."""
    if codec == 0:
        return data
    if codec == 1:
        return bytes(gzip_encode(data, GZIP_LEVEL))
    if codec == 2:
        return bytes(snappy_encode(data))
    if codec == 3:
        return bytes(lz4_encode(data))
    if codec == 4:
        return bytes(zstd_encode(data))
    raise ProtocolError(f"unknown compression codec {codec}")


def records_section(batch: bytes | memoryview, header: BatchHeader) -> bytes:
    """The batch's records, decompressed. ``ProtocolError`` if they cannot be."""
    return decompress(header.compression, memoryview(batch)[HEADER_SIZE : header.size])


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos + 1
        shift += 7
        if shift > 63:
            raise ProtocolError("varint too long")


def encode_varint(value: int) -> bytes:
    """A signed varint: ``value`` zigzag-encoded, then as an unsigned varint."""
    return encode_uvarint((value << 1) ^ (value >> 63))


def parse_records(buf: bytes, count: int) -> list[RecordView]:
    """The ``count`` records of a (decompressed) records section, which they must fill
    exactly. Headers are not decoded. ``ProtocolError`` on anything malformed.

    The hot loop of the cleaner: one- and two-byte varints (most deltas and lengths) are
    decoded inline, longer ones by ``_varint``.
    """
    out: list[RecordView] = []
    append = out.append
    new = tuple.__new__
    pos = 0
    end_of_buf = len(buf)
    try:
        for _ in range(count):
            start = pos
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                zz = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (zz >> 1) ^ -(zz & 1)
                pos += 2
            else:
                length, pos = _varint(buf, pos)
            body = pos
            end = body + length
            if length < 6 or end > end_of_buf:
                raise ProtocolError(f"record length {length} does not fit the batch")
            pos = body + 1  # attributes
            b = buf[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = _varint(buf, pos)
            ts_end = pos
            b = buf[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                zz = (b & 0x7F) | (buf[pos + 1] << 7)
                offset_delta = (zz >> 1) ^ -(zz & 1)
                pos += 2
            else:
                offset_delta, pos = _varint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                key_len = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                key_len, pos = _varint(buf, pos)
            key = None
            if key_len >= 0:
                key = buf[pos : pos + key_len]
                pos += key_len
            b = buf[pos]
            if b < 0x80:
                value_len = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                zz = (b & 0x7F) | (buf[pos + 1] << 7)
                value_len = (zz >> 1) ^ -(zz & 1)
                pos += 2
            else:
                value_len, pos = _varint(buf, pos)
            if pos > end or (value_len > 0 and pos + value_len > end):
                raise ProtocolError("record fields overrun the record")
            append(new(RecordView, (start, body, ts_end, end, ts_delta, offset_delta, key,
                                    value_len >= 0)))
            pos = end
    except IndexError as e:
        raise ProtocolError("truncated record") from e
    if pos != end_of_buf:
        raise ProtocolError(f"{end_of_buf - pos} bytes after the last record")
    return out


def batch_records(batch: bytes | memoryview, header: BatchHeader) -> tuple[bytes, list[RecordView]]:
    """The decompressed records section and its records."""
    buf = records_section(batch, header)
    return buf, parse_records(buf, header.record_count)


def has_null_key(batch: bytes | memoryview, header: BatchHeader) -> bool:
    """Whether any record of the batch has a null key (refused by compacted topics)."""
    return any(r.key is None for r in batch_records(batch, header)[1])


def copy_record(buf: bytes, record: RecordView, timestamp_shift: int = 0) -> bytes:
    """The record's bytes, with its timestamp delta lowered by ``timestamp_shift`` (when
    the batch's base timestamp rises by that much)."""
    if timestamp_shift == 0:
        return buf[record.start : record.end]
    body = (buf[record.body : record.body + 1]
            + encode_varint(record.timestamp_delta - timestamp_shift)
            + buf[record.ts_end : record.end])
    return encode_varint(len(body)) + body


def build_raw_batch(header: BatchHeader, records: bytes, record_count: int, *,
                    attributes: int, base_timestamp: int, max_timestamp: int) -> bytes:
    """A v2 batch with ``header``'s base offset, last offset delta, leader epoch and
    producer fields, and the given (uncompressed, encoded) records, compressed with the
    codec in ``attributes``. An empty batch (``record_count`` 0) is never compressed."""
    if record_count == 0:
        attributes &= ~COMPRESSION_MASK
        body = b""
    else:
        body = compress(attributes & COMPRESSION_MASK, records)
    tail = _TAIL.pack(attributes, header.last_offset_delta, base_timestamp, max_timestamp,
                      header.producer_id, header.producer_epoch, header.base_sequence,
                      record_count) + body
    crc = crc32c.crc32c(tail)
    return _HEAD.pack(header.base_offset, 4 + 1 + 4 + len(tail), header.partition_leader_epoch,
                      2, crc) + tail


def build_empty_batch(header: BatchHeader) -> bytes:
    """The batch's header alone, no records (Kafka keeps one to preserve a producer's last
    sequence and epoch after all its records were cleaned): both timestamps are the
    original max timestamp, no compression, no delete horizon."""
    attributes = header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_FLAG)
    return build_raw_batch(header, b"", 0, attributes=attributes,
                           base_timestamp=header.max_timestamp,
                           max_timestamp=header.max_timestamp)


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon (ms since the epoch), or None when not set."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None


def is_control(header: BatchHeader) -> bool:
    return bool(header.attributes & CONTROL_FLAG)


def stamp_log_append_time(buf: bytearray, pos: int, header: BatchHeader,
                          now_ms: int) -> BatchHeader:
    """Make the batch at ``pos`` a LogAppendTime batch stamped ``now_ms`` (timestamp-type
    attribute bit and maxTimestamp, CRC recomputed), as Kafka's broker does; returns the
    new header. Records keep their deltas: readers take the batch's max timestamp."""
    attributes = header.attributes | TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", buf, pos + ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">q", buf, pos + _MAX_TIMESTAMP_OFFSET, now_ms)
    crc = compute_crc(buf, pos, header.size)
    struct.pack_into(">I", buf, pos + CRC_OFFSET, crc)
    return replace(header, attributes=attributes, max_timestamp=now_ms, crc=crc)
