"""Request header parsing (v1, and v2 with tagged fields for flexible versions).

Parsed by hand because the header decides which codec class and version decode the body.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from headrace.protocol.errors import ProtocolError

_HEADER = struct.Struct(">hhih")


class RequestHeader:
    __slots__ = ("api_key", "api_version", "client_id", "correlation_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int,
                 client_id: str | None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: (value, next position). Raises ``ProtocolError``."""
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ProtocolError("bad varint in request header")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def encode_uvarint(n: int) -> bytes:
    """``n`` (>= 0) as an unsigned varint: the lengths of flexible versions' compact
    strings and arrays, and of Kafka's own record formats."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def parse_request_header(
    frame: bytes, is_flexible: Callable[[int, int], bool]
) -> tuple[RequestHeader, int]:
    """Parse the header at the start of ``frame``; ``is_flexible(api_key, version)`` says
    whether tagged fields follow the client id. Returns the header and where the body
    starts. Raises ``ProtocolError`` on a short or malformed header."""
    if len(frame) < _HEADER.size:
        raise ProtocolError(f"request frame of {len(frame)} bytes is too short for a header")
    api_key, api_version, correlation_id, n = _HEADER.unpack_from(frame, 0)
    pos = _HEADER.size
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(frame):
            raise ProtocolError("client_id runs past the end of the frame")
        client_id = frame[pos : pos + n].decode("utf-8", "replace")
        pos += n
    if is_flexible(api_key, api_version):
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise ProtocolError("tagged fields run past the end of the frame")
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos
