"""v2 record batches decoded straight into Arrow columns, without a Python object per record.

The reader of ``format("headrace")`` receives whole batches from Fetch responses. Their
records are varint-framed, so finding record ``i+1`` needs record ``i``'s length: a
sequential scan that Python would pay ~1 µs per record for. The scan here is compiled with
numba (LLVM, once per process, cached on disk): it walks the records sections of many
batches in one call, one pass, and fills the offset/timestamp arrays and contiguous key and
value buffers of the fields the caller asked for (Arrow's layout: the arrays are built
without further copies), and the positions of the records' headers for a second kernel.

Input contract (``decode``): ``buf`` holds the records sections (after the 61-byte batch
header, decompressed) of ``n`` batches; for batch ``b`` its section is
``buf[starts[b]:ends[b]]``, its records are at most ``counts[b]``, its base offset and
timestamp are ``base_offsets[b]`` / ``base_timestamps[b]``, and ``append_times[b]`` is the
batch's max timestamp when it is a LogAppendTime batch, else -1. Records with offsets outside
``[low, high)`` are skipped (a batch may start before the position a read asked for). The
caller has already dropped control batches and aborted transactions. No I/O.

A malformed section (a varint or a length running past its section, a negative length other
than -1, more records than the header says) raises ``CorruptBatchError`` naming the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from headrace.protocol.batch_codec import decompress
from headrace.protocol.errors import ProtocolError
from headrace.protocol.records import (
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_LENGTH_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_RECORD_SIZE,
    RECORD_COUNT_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    CorruptBatchError,
    UnsupportedMagicError,
    compute_crc,
    control_committed,
    parse_header,
)

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

# Kernel status codes (a jitted function cannot raise with a message).
_OK = 0
_OVERRUN = 1
_BAD_LENGTH = 2
_TOO_MANY = 3
_REASONS = {_OVERRUN: "a record runs past the end of its batch",
            _BAD_LENGTH: "a negative length other than -1",
            _TOO_MANY: "more records than the batch header's count"}


def _copy_typed(typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any, n: Any) -> Any:
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        d, d_at, s, s_at, length = args
        d_array = context.make_array(signature.args[0])(context, builder, d)
        s_array = context.make_array(signature.args[2])(context, builder, s)
        _raw_memcpy(builder, builder.gep(d_array.data, [d_at]),
                    builder.gep(s_array.data, [s_at]), length, 1)
        return context.get_dummy_value()

    return sig, codegen


_raw_memcpy: Any = cgutils.raw_memcpy
_copy: Any = intrinsic(_copy_typed)
"""``_copy(dst, dst_at, src, src_at, n)``: ``dst[dst_at:dst_at + n] = src[src_at:src_at + n]``
as one ``memcpy``, without the slice objects numba builds for a slice assignment (five times
slower per 100-byte value). Unchecked: callers have bounds-checked both ranges."""


@njit(cache=True, nogil=True)
def _varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """Zig-zag varint at ``pos``: (value, next position); next position -1 on overrun."""
    result = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            return 0, -1
        b = int(buf[pos])
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


@njit(cache=True, nogil=True, inline="always")
def _put(data: Any, offsets: Any, valid: Any, n: int, at: int, buf: Any, start: int,
         length: int) -> int:
    """Record ``n``'s key or value (``length`` -1: null) appended to an Arrow column at
    byte ``at``; returns the next byte."""
    if length < 0:
        valid[n] = 0
    else:
        valid[n] = 1
        _copy(data, at, buf, start, length)
        at += length
    offsets[n + 1] = at
    return at


@njit(cache=True, nogil=True)
def _scan(buf: Any, starts: Any, ends: Any, counts: Any, base_offsets: Any, low: int,
          high: int, meta: Any, keys: Any, values: Any, heads: Any) -> tuple[int, int, int, int]:
    """One pass over every record: the kept ones (offsets in ``[low, high)``) fill, for
    each part asked for (an empty array is not asked for), ``meta[i] = (offset, timestamp
    delta, batch index)``, the Arrow columns of keys and of values (``keys = (data,
    offsets, validity)``, data copied with one ``memcpy`` per record) and ``heads[i] =
    (headers start, header count, record end)``. Returns (status, failing batch, records,
    header count)."""
    with_meta, with_heads = meta.shape[0] > 0, heads.shape[0] > 0
    key_data, key_offsets, key_valid = keys
    value_data, value_offsets, value_valid = values
    with_key, with_value = key_offsets.size > 0, value_offsets.size > 0
    if with_key:
        key_offsets[0] = 0
    if with_value:
        value_offsets[0] = 0
    key_at = 0
    value_at = 0
    n = 0
    headers = 0
    for b in range(starts.size):
        pos = starts[b]
        end = ends[b]
        seen = 0
        while pos < end:
            if seen >= counts[b]:
                return _TOO_MANY, b, n, headers
            seen += 1
            length, pos = _varint(buf, pos, end)
            if pos < 0:
                return _OVERRUN, b, n, headers
            stop = pos + length
            if length < 0 or stop > end:
                return _OVERRUN, b, n, headers
            pos += 1  # attributes
            ts_delta, pos = _varint(buf, pos, stop)
            if pos < 0:
                return _OVERRUN, b, n, headers
            off_delta, pos = _varint(buf, pos, stop)
            if pos < 0:
                return _OVERRUN, b, n, headers
            key_len, pos = _varint(buf, pos, stop)
            if pos < 0:
                return _OVERRUN, b, n, headers
            if key_len < -1:
                return _BAD_LENGTH, b, n, headers
            key_start = pos
            pos += max(key_len, 0)
            value_len, pos = _varint(buf, pos, stop)
            if pos < 0:
                return _OVERRUN, b, n, headers
            if value_len < -1:
                return _BAD_LENGTH, b, n, headers
            value_start = pos
            pos += max(value_len, 0)
            count, pos = _varint(buf, pos, stop)
            # A header takes at least two bytes: a count beyond that is not a count.
            if pos < 0 or pos > stop or count < 0 or count > (stop - pos) // 2:
                return _OVERRUN, b, n, headers
            offset = base_offsets[b] + off_delta
            if low <= offset < high:
                if with_meta:
                    meta[n, 0] = offset
                    meta[n, 1] = ts_delta
                    meta[n, 2] = b
                if with_key:
                    key_at = _put(key_data, key_offsets, key_valid, n, key_at, buf,
                                  key_start, key_len)
                if with_value:
                    value_at = _put(value_data, value_offsets, value_valid, n, value_at, buf,
                                    value_start, value_len)
                if with_heads:
                    heads[n, 0] = pos
                    heads[n, 1] = count
                    heads[n, 2] = stop
                    headers += count
                n += 1
            pos = stop
    return _OK, -1, n, headers


@njit(cache=True, nogil=True)
def _headers(buf: Any, heads: Any, n: int, total: int, list_offsets: Any, key_offsets: Any,
             value_offsets: Any, value_valid: Any) -> tuple[int, Any, Any]:
    """The headers of the first ``n`` records, flattened. Returns (status, key bytes,
    value bytes)."""
    key_data = np.empty(max(total * 16, 64), np.uint8)
    value_data = np.empty(max(total * 64, 64), np.uint8)
    k_at = 0
    v_at = 0
    h = 0
    list_offsets[0] = 0
    key_offsets[0] = 0
    value_offsets[0] = 0
    for i in range(n):
        pos = heads[i, 0]
        stop = heads[i, 2]
        for _ in range(heads[i, 1]):
            key_len, pos = _varint(buf, pos, stop)
            if pos < 0 or key_len < 0 or pos + key_len > stop:
                return _OVERRUN, key_data, value_data
            while k_at + key_len > key_data.size:
                bigger = np.empty(key_data.size * 2, np.uint8)
                bigger[:k_at] = key_data[:k_at]
                key_data = bigger
            _copy(key_data, k_at, buf, pos, key_len)
            k_at += key_len
            pos += key_len
            value_len, pos = _varint(buf, pos, stop)
            if pos < 0 or value_len < -1 or pos + max(value_len, 0) > stop:
                return _OVERRUN, key_data, value_data
            if value_len < 0:
                value_valid[h] = 0
            else:
                value_valid[h] = 1
                while v_at + value_len > value_data.size:
                    bigger = np.empty(value_data.size * 2, np.uint8)
                    bigger[:v_at] = value_data[:v_at]
                    value_data = bigger
                _copy(value_data, v_at, buf, pos, value_len)
                v_at += value_len
                pos += value_len
            h += 1
            key_offsets[h] = k_at
            value_offsets[h] = v_at
        list_offsets[i + 1] = h
    return _OK, key_data[:k_at], value_data[:v_at]


@dataclass(frozen=True)
class Sections:
    """The records sections of several batches laid end to end (see the module docstring)."""

    buf: np.ndarray[Any, np.dtype[np.uint8]]
    starts: np.ndarray[Any, np.dtype[np.int64]]
    ends: np.ndarray[Any, np.dtype[np.int64]]
    counts: np.ndarray[Any, np.dtype[np.int64]]
    base_offsets: np.ndarray[Any, np.dtype[np.int64]]
    base_timestamps: np.ndarray[Any, np.dtype[np.int64]]
    append_times: np.ndarray[Any, np.dtype[np.int64]]


@dataclass(frozen=True)
class Columns:
    """Decoded records: Kafka's record fields as Arrow arrays of ``rows`` rows each, or
    ``None`` for the fields not asked for."""

    rows: int
    key: pa.Array | None
    value: pa.Array | None
    offset: pa.Array | None  # int64
    timestamp_ms: pa.Array | None  # int64, milliseconds since the epoch
    timestamp_type: pa.Array | None  # int32: 0 CreateTime, 1 LogAppendTime
    headers: pa.Array | None  # HEADER_TYPE

    def __len__(self) -> int:
        return self.rows


_NONE = np.empty(0, np.int64)
_NO_FIELD = (np.empty(0, np.uint8), np.empty(0, np.int32), np.empty(0, np.uint8))


def _field(upper: int, size: int) -> tuple[Any, Any, Any]:
    """Room for the keys or values of ``upper`` records from ``size`` bytes of sections:
    (data, Arrow offsets, validity per record)."""
    return np.empty(size, np.uint8), np.empty(upper + 1, np.int32), np.empty(upper, np.uint8)


def _binary(field: tuple[Any, Any, Any], n: int) -> pa.Array:
    data, offsets, valid = field
    valid = valid[:n].view(np.bool_)
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [
        validity, pa.py_buffer(offsets[:n + 1]), pa.py_buffer(data[:int(offsets[n])])])


def decode(sections: Sections, low: int, high: int, with_headers: bool, *,
           with_key: bool = True, with_value: bool = True, with_meta: bool = True) -> Columns:
    """Every record of ``sections`` with an offset in ``[low, high)``, in order, in one pass.
    Keys, values, headers and the offset/timestamp columns (``with_meta``) not asked for
    are ``None`` and never copied out; every record is checked all the same."""
    s = sections
    # Never trust a header's count for an allocation: a record takes at least 7 bytes.
    upper = int(np.minimum(s.counts, (s.ends - s.starts) // MIN_RECORD_SIZE).sum())
    size = int((s.ends - s.starts).sum())  # keys and values fit in their sections
    meta = np.empty((upper, 3), np.int64) if with_meta else _NONE.reshape(0, 3)
    keys = _field(upper, size) if with_key else _NO_FIELD
    values = _field(upper, size) if with_value else _NO_FIELD
    heads = np.empty((upper, 3), np.int64) if with_headers else _NONE.reshape(0, 3)
    status, batch, n, header_count = _scan(s.buf, s.starts, s.ends, s.counts, s.base_offsets,
                                           low, high, meta, keys, values, heads)
    if status != _OK:
        raise CorruptBatchError(
            f"record batch at offset {int(s.base_offsets[batch])}: {_REASONS[status]}")
    offset = timestamp_ms = timestamp_type = None
    if with_meta:
        meta = meta[:n]
        batch_of = meta[:, 2]
        appended = s.append_times[batch_of]
        offset = pa.array(meta[:, 0])
        timestamp_ms = pa.array(np.where(appended >= 0, appended,
                                         s.base_timestamps[batch_of] + meta[:, 1]))
        timestamp_type = pa.array((appended >= 0).astype(np.int32))
    return Columns(
        rows=n, key=_binary(keys, n) if with_key else None,
        value=_binary(values, n) if with_value else None, offset=offset,
        timestamp_ms=timestamp_ms, timestamp_type=timestamp_type,
        headers=_header_array(s.buf, heads, n, header_count) if with_headers else None)


def _header_array(buf: Any, heads: Any, n: int, total: int) -> pa.Array:
    list_offsets = np.empty(n + 1, np.int32)
    key_offsets = np.empty(total + 1, np.int32)
    value_offsets = np.empty(total + 1, np.int32)
    value_valid = np.empty(total, np.uint8)
    status, key_data, value_data = _headers(buf, heads, n, total, list_offsets, key_offsets,
                                            value_offsets, value_valid)
    if status != _OK:
        raise CorruptBatchError("a record header runs past the end of its batch")
    keys = pa.Array.from_buffers(pa.string(), total, [None, pa.py_buffer(key_offsets),
                                                      pa.py_buffer(key_data)])
    values = _binary((value_data, value_offsets, value_valid), total)
    entries = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
    return pa.ListArray.from_arrays(pa.array(list_offsets), entries).cast(HEADER_TYPE)


# Columns of ``_batch_table``'s rows.
_POS, _SIZE, _BASE, _LAST, _BASE_TS, _MAX_TS, _ATTRS, _CRC, _COUNT = range(9)


@njit(cache=True, nogil=True)
def _be(buf: Any, pos: int, n: int) -> int:
    """The big-endian signed integer of ``n`` (2, 4 or 8) bytes at ``pos``."""
    value = 0
    for i in range(n):
        value = (value << 8) | int(buf[pos + i])  # eight bytes wrap to the signed value
    if n < 8 and value >= 1 << (8 * n - 1):
        value -= 1 << (8 * n)
    return value


@njit(cache=True, nogil=True)
def _batch_table(buf: Any, table: Any) -> tuple[int, bool]:
    """The headers of the complete v2 batches at the start of ``buf``, one row of
    ``table`` each (columns ``_POS`` ... ``_COUNT``); stops at a torn batch. Returns
    (batches, ok): not ok at a batch length below the header's or a magic other than 2
    (the caller's checked path says which)."""
    pos = 0
    n = 0
    while buf.size - pos >= HEADER_SIZE:
        size = _be(buf, pos + BATCH_LENGTH_OFFSET, 4) + LOG_OVERHEAD
        if size < HEADER_SIZE or buf[pos + MAGIC_OFFSET] != 2:
            return n, False
        if pos + size > buf.size:
            break
        base = _be(buf, pos, 8)
        table[n, _POS] = pos
        table[n, _SIZE] = size
        table[n, _BASE] = base
        table[n, _LAST] = base + _be(buf, pos + LAST_OFFSET_DELTA_OFFSET, 4)
        table[n, _BASE_TS] = _be(buf, pos + BASE_TIMESTAMP_OFFSET, 8)
        table[n, _MAX_TS] = _be(buf, pos + MAX_TIMESTAMP_OFFSET, 8)
        table[n, _ATTRS] = _be(buf, pos + ATTRIBUTES_OFFSET, 2)
        table[n, _CRC] = _be(buf, pos + CRC_OFFSET, 4) & 0xFFFFFFFF
        table[n, _COUNT] = _be(buf, pos + RECORD_COUNT_OFFSET, 4)
        n += 1
        pos += size
    return n, True


def _split_plain(view: memoryview, position: int, read_committed: bool,
                 aborted: list[tuple[int, int]]) -> tuple[Sections, int] | None:
    """``split`` for the common response, its batch headers read by a compiled walk: v2
    batches, uncompressed, no control batch, nothing to drop for aborted transactions.
    None for any other response (``split``'s loop takes it)."""
    buf = np.frombuffer(view, np.uint8)
    table = np.empty((len(buf) // HEADER_SIZE, 9), np.int64)
    n, ok = _batch_table(buf, table)
    if not ok:
        return None
    table = table[:n]
    attrs = table[:, _ATTRS]
    if ((attrs & (CONTROL_FLAG | COMPRESSION_MASK)).any()
            or (read_committed and aborted and (attrs & TRANSACTIONAL_FLAG).any())):
        return None
    for pos, size, crc, base in table[:, [_POS, _SIZE, _CRC, _BASE]].tolist():
        if compute_crc(view, pos, size) != crc:
            raise CorruptBatchError(f"record batch at offset {base}: CRC mismatch")
    after = max(position, int(table[:, _LAST].max()) + 1) if n else position
    kept = table[table[:, _LAST] >= position]
    starts = kept[:, _POS] + HEADER_SIZE
    return Sections(buf=buf, starts=starts, ends=kept[:, _POS] + kept[:, _SIZE],
                    counts=kept[:, _COUNT].copy(), base_offsets=kept[:, _BASE].copy(),
                    base_timestamps=kept[:, _BASE_TS].copy(),
                    append_times=np.where(kept[:, _ATTRS] & TIMESTAMP_TYPE_MASK,
                                          kept[:, _MAX_TS], -1)), after


def split(records: bytes | bytearray | memoryview, position: int, read_committed: bool,
          aborted: list[tuple[int, int]]) -> tuple[Sections, int]:
    """The batches of one Fetch response's ``records``, ready for ``decode``, and the offset
    after the last complete batch (never below ``position``).

    Checks each batch's CRC-32C (``CorruptBatchError``); drops control batches and, under
    read_committed, the batches of ``aborted`` transactions (``(producer id, first
    offset)`` from the response) as Kafka's consumer does; decompresses the rest. A torn
    batch at the end (a response cut at its size limit) is left for the next fetch."""
    view = memoryview(records)
    plain = _split_plain(view, position, read_committed, aborted)
    if plain is not None:
        return plain
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    parts: list[bytes | memoryview] = []
    meta: list[tuple[int, int, int, int, int]] = []
    in_place: list[int] = []  # where each kept section starts in ``records``
    compressed = False
    pos = 0
    after = position
    while len(view) - pos >= HEADER_SIZE:
        h = parse_header(view, pos)
        if h.magic != 2:
            raise UnsupportedMagicError(f"record batch at offset {h.base_offset} has magic "
                                        f"{h.magic}; only v2 batches are read")
        size = h.size
        if size < HEADER_SIZE:
            raise CorruptBatchError(f"record batch at offset {h.base_offset}: length {size}")
        if pos + size > len(view):
            break
        if compute_crc(view, pos, size) != h.crc:
            raise CorruptBatchError(f"record batch at offset {h.base_offset}: CRC mismatch")
        if h.last_offset >= position:
            while pending and pending[0][1] <= h.last_offset:
                aborting.add(pending.pop(0)[0])
            if h.is_control:
                if control_committed(bytes(view[pos:pos + size])) is False:
                    aborting.discard(h.producer_id)
            elif not (read_committed and h.is_transactional and h.producer_id in aborting):
                try:
                    section = (view[pos + HEADER_SIZE:pos + size] if h.compression == 0 else
                               decompress(h.compression, view[pos + HEADER_SIZE:pos + size]))
                except ProtocolError as e:
                    raise CorruptBatchError(f"record batch at offset {h.base_offset}: {e}") from e
                parts.append(section)
                in_place.append(pos + HEADER_SIZE)
                compressed = compressed or h.compression != 0
                append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else -1
                meta.append((len(section), h.record_count, h.base_offset, h.base_timestamp,
                             append_time))
        after = max(after, h.last_offset + 1)
        pos += size
    if parts and not compressed:
        # Uncompressed: the sections are decoded where they are, without a copy.
        table = np.array(meta, np.int64).reshape(-1, 5)
        starts = np.array(in_place, np.int64)
        return Sections(buf=np.frombuffer(view, np.uint8), starts=starts,
                        ends=starts + table[:, 0], counts=table[:, 1].copy(),
                        base_offsets=table[:, 2].copy(), base_timestamps=table[:, 3].copy(),
                        append_times=table[:, 4].copy()), after
    return _sections(parts, meta), after


def _sections(parts: list[bytes | memoryview], meta: list[tuple[int, int, int, int, int]]
              ) -> Sections:
    table = np.array(meta, np.int64).reshape(-1, 5)
    ends = np.cumsum(table[:, 0])
    buf = np.frombuffer(b"".join(parts), np.uint8)
    return Sections(buf=buf, starts=ends - table[:, 0], ends=ends, counts=table[:, 1].copy(),
                    base_offsets=table[:, 2].copy(), base_timestamps=table[:, 3].copy(),
                    append_times=table[:, 4].copy())
