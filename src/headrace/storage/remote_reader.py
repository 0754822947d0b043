"""Reads of remote segments: whole batches by offset, and offsets by timestamp, through
a bounded cache of fixed-size chunks of the stored objects.

A read locates its batch with the segment's offset index (fetched once, cached like a
chunk), then cuts whole batches out of cached ``chunk_bytes`` ranges of the log object,
so consumers reading a cold partition in order fetch each chunk from the store once; with
a ``read_ahead`` executor, each read also starts fetching the next ``READ_AHEAD_CHUNKS``
chunks of the segment, so a consumer reading in order mostly finds them cached. A chunk
being fetched is fetched once: other readers wait for it.
Thread-safe: the broker calls it from its remote-reader worker threads, never from the
event loop (every call may block on the store). Errors of the store raise
``RemoteStorageError``.
"""

from __future__ import annotations

import contextlib
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass

from headrace.protocol.errors import ProtocolError
from headrace.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    parse_header,
    record_timestamps,
)
from headrace.storage.remote_metadata import RemoteSegment
from headrace.storage.remote_store import RemoteStorage, RemoteStorageError

READ_AHEAD_CHUNKS = 2
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


@dataclass
class ReaderStats:
    """Counters for the broker's metrics (updated under the reader's lock)."""

    reads: int = 0
    read_bytes: int = 0
    read_seconds: float = 0.0
    store_gets: int = 0
    store_bytes: int = 0
    cache_hits: int = 0
    errors: int = 0


class RemoteReader:
    """Reads remote segments of any partition; ``cache_bytes`` bounds the chunk cache."""

    def __init__(self, store: RemoteStorage, chunk_bytes: int = 1024 * 1024,
                 cache_bytes: int = 64 * 1024 * 1024,
                 read_ahead: Executor | None = None) -> None:
        self.store = store
        self.read_ahead = read_ahead
        self._inflight: dict[tuple[str, int], threading.Event] = {}
        self.chunk_bytes = chunk_bytes
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()
        self.stats = ReaderStats()

    # --- the cache ----------------------------------------------------------------------

    def _object(self, key: str, chunk: int, fetch: tuple[int, int] | None) -> bytes:
        """Chunk ``chunk`` of object ``key`` (``fetch``: its byte range; None: the whole
        object, cached under chunk -1)."""
        while True:
            with self._lock:
                data = self._cache.get((key, chunk))
                if data is not None:
                    self._cache.move_to_end((key, chunk))
                    self.stats.cache_hits += 1
                    return data
                pending = self._inflight.get((key, chunk))
                if pending is None:
                    mine = self._inflight[(key, chunk)] = threading.Event()
                    break
            pending.wait()  # another reader fetches it; then look again (or fetch: it failed)
        try:
            data = self.store.get(key) if fetch is None else self.store.get_range(key, *fetch)
            with self._lock:
                self.stats.store_gets += 1
                self.stats.store_bytes += len(data)
                if len(data) <= self.cache_bytes and (key, chunk) not in self._cache:
                    self._cache[(key, chunk)] = data
                    self._cached += len(data)
                    while self._cached > self.cache_bytes:
                        _, old = self._cache.popitem(last=False)
                        self._cached -= len(old)
        finally:
            with self._lock:
                del self._inflight[(key, chunk)]
            mine.set()
        return data

    def _prefetch(self, key: str, size: int, position: int) -> None:
        """Fetch the chunks after ``position`` into the cache (speculative: failures are
        left to the read that needs them)."""
        first = position // self.chunk_bytes
        last = min(first + READ_AHEAD_CHUNKS, (size - 1) // self.chunk_bytes + 1)
        for c in range(first, last):
            lo = c * self.chunk_bytes
            with contextlib.suppress(RemoteStorageError):
                self._object(key, c, (lo, min(lo + self.chunk_bytes, size)))

    def _range(self, key: str, size: int, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a log object of ``size`` bytes, from cached chunks."""
        end = min(end, size)
        parts = []
        first, last = start // self.chunk_bytes, (end - 1) // self.chunk_bytes
        for c in range(first, last + 1):
            lo = c * self.chunk_bytes
            data = self._object(key, c, (lo, min(lo + self.chunk_bytes, size)))
            parts.append(data[max(start - lo, 0) : end - lo])
        return b"".join(parts)

    # --- reads --------------------------------------------------------------------------

    def _position(self, prefix: str, seg: RemoteSegment, offset: int) -> int:
        """A batch boundary at or before the batch holding ``offset`` (offset index)."""
        index = self._object(seg.key(prefix, ".index"), -1, None)
        relative = offset - seg.base_offset
        pos = 0
        lo, hi = 0, len(index) // _OFFSET_ENTRY.size - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            rel, p = _OFFSET_ENTRY.unpack_from(index, mid * _OFFSET_ENTRY.size)
            if rel <= relative:
                pos, lo = p, mid + 1
            else:
                hi = mid - 1
        return int(pos)

    def _headers(self, prefix: str, seg: RemoteSegment,
                 pos: int) -> Iterator[tuple[int, BatchHeader]]:
        key = seg.key(prefix, ".log")
        while pos + HEADER_SIZE <= seg.size:
            header = parse_header(self._range(key, seg.size, pos, pos + HEADER_SIZE))
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return
            yield pos, header
            pos += header.size

    def read(self, prefix: str, seg: RemoteSegment, offset: int, max_bytes: int,
             min_one: bool = True) -> bytes:
        """Whole batches of ``seg`` from the one holding ``offset``, up to ``max_bytes``
        (the first even if larger, with ``min_one``: KIP-74). Blocking."""
        started = time.monotonic()
        try:
            key = seg.key(prefix, ".log")
            begin = end = -1
            for pos, header in self._headers(prefix, seg, self._position(prefix, seg, offset)):
                if begin < 0:
                    if header.last_offset < offset:
                        continue
                    begin = pos
                    if header.size > max_bytes and not min_one:
                        return b""
                    end = pos + header.size
                    continue
                if pos + header.size - begin > max_bytes:
                    break
                end = pos + header.size
            data = self._range(key, seg.size, begin, end) if begin >= 0 else b""
            if self.read_ahead is not None and 0 <= end < seg.size:
                self.read_ahead.submit(self._prefetch, key, seg.size, end)
        except (RemoteStorageError, ProtocolError):
            with self._lock:
                self.stats.errors += 1
            raise
        with self._lock:
            self.stats.reads += 1
            self.stats.read_bytes += len(data)
            self.stats.read_seconds += time.monotonic() - started
        return data

    def offset_for_timestamp(self, prefix: str, seg: RemoteSegment, timestamp: int,
                             start_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record of ``seg`` at or after
        ``start_offset`` whose timestamp is >= ``timestamp``, else None. Blocking."""
        timeindex = self._object(seg.key(prefix, ".timeindex"), -1, None)
        relative = 0
        for i in range(len(timeindex) // _TIME_ENTRY.size):
            ts, rel = _TIME_ENTRY.unpack_from(timeindex, i * _TIME_ENTRY.size)
            if ts >= timestamp:
                break
            relative = int(rel)
        key = seg.key(prefix, ".log")
        start = self._position(prefix, seg, seg.base_offset + relative)
        for pos, header in self._headers(prefix, seg, start):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            batch = self._range(key, seg.size, pos, pos + header.size)
            try:
                stamps = record_timestamps(batch)
            except ProtocolError:
                return max(header.base_offset, start_offset), header.max_timestamp
            for off, ts in stamps:
                if ts >= timestamp and off >= start_offset:
                    return off, ts
        return None

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._cached = 0
