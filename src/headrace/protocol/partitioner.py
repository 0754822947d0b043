"""Kafka's default partitioner for keyed records, as the Java client computes it.

librdkafka's ``murmur2_random`` partitioner (used by ``headrace produce``) is meant to agree
with it; the demo checks that it does.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as an unsigned 32-bit value (Java returns it as signed)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length - tail
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def java_partition(key: bytes, partitions: int) -> int:
    """``toPositive(murmur2(key)) % partitions``: where a Java producer puts a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
