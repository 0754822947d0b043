"""The cleaner's offset map: for each key of the dirty part of a log, its latest offset.

Kafka hashes every key to 16 bytes (MD5) in a fixed array sized by
``log.cleaner.dedupe.buffer.size``. Here keys up to ``DIGEST_ABOVE`` bytes are kept as they
are (exact), longer ones as a 16-byte BLAKE2b digest prefixed with a marker byte (a
collision, like Kafka's, would need a cryptographic one). Memory is accounted with an
estimate of what a Python dict entry costs, so ``capacity_bytes`` bounds the map roughly.
"""

from __future__ import annotations

import hashlib

DIGEST_ABOVE = 32
# dict slot + bytes object header + int object, measured on CPython 3.11 (rounded up).
ENTRY_OVERHEAD = 120


def _map_key(key: bytes) -> bytes:
    if len(key) <= DIGEST_ABOVE:
        return key
    return b"\xff" + hashlib.blake2b(key, digest_size=16).digest()


class OffsetMap:
    """key -> latest offset. Not thread-safe (one cleaning pass owns it)."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self.latest_offset = -1
        self._offsets: dict[bytes, int] = {}

    def put(self, key: bytes, offset: int) -> None:
        """Record ``offset`` for ``key``; offsets must be put in increasing order."""
        k = key if len(key) <= DIGEST_ABOVE else _map_key(key)
        offsets = self._offsets
        if k not in offsets:
            self.used_bytes += ENTRY_OVERHEAD + len(k)
        offsets[k] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset put for ``key``, or -1."""
        return self._offsets.get(key if len(key) <= DIGEST_ABOVE else _map_key(key), -1)

    @property
    def full(self) -> bool:
        return self.used_bytes >= self.capacity_bytes

    def __len__(self) -> int:
        return len(self._offsets)
