"""The consumer protocol's subscription metadata (what JoinGroup members of protocol type
"consumer" carry): version int16, topics [string], user data, and (v1+) owned partitions.
Only the topics are read here."""

from __future__ import annotations

import struct


def subscribed_topics(metadata: bytes) -> set[str]:
    """Topics named in a consumer subscription; an empty set when unparsable."""
    try:
        pos = 2  # version
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        topics = set()
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            topics.add(metadata[pos : pos + n].decode())
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()
