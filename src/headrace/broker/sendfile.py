"""Writing a response whose parts may be byte ranges of segment files.

Small ranges are read and written through the transport. Large ranges go out with
``sendfile(2)`` straight from the page cache to the socket: the transport's buffer is
drained first so bytes stay in order, then the socket's (duplicated) descriptor is
written directly, waiting for writability when the socket buffer is full. Every region
is closed, whatever happens.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from headrace.storage.log import FileRegion

# Below this, one pread + write is cheaper than draining the transport for sendfile.
SENDFILE_MIN_BYTES = 64 * 1024


@dataclass(slots=True)
class FramedResponse:
    """A response body already framed by its handler: ``bytes`` and ``FileRegion`` parts."""

    parts: list[object]

    @property
    def size(self) -> int:
        return sum(_length(p) for p in self.parts)

    def close(self) -> None:
        for p in self.parts:
            if isinstance(p, FileRegion):
                p.close()


def _length(part: object) -> int:
    if isinstance(part, FileRegion):
        return part.length
    if isinstance(part, bytes):
        return len(part)
    raise TypeError(f"response part of type {type(part).__name__}")


async def write_parts(writer: asyncio.StreamWriter, parts: list[object],
                      prefix: bytes = b"") -> None:
    """Write ``prefix`` then ``parts`` in order. Raises ConnectionError/OSError when the
    peer goes away.

    Consecutive bytes (framing, and small regions read into memory) go to the transport
    as one write, i.e. one ``send(2)`` when the socket has room: a response of small parts
    costs one system call rather than one per part. Over TLS every region is read into
    memory (``sendfile(2)`` would put plaintext on an encrypted connection)."""
    sock = None if writer.get_extra_info("ssl_object") is not None else \
        writer.get_extra_info("socket")
    pending: list[bytes] = [prefix] if prefix else []
    for part in parts:
        if isinstance(part, bytes):
            pending.append(part)
        elif not isinstance(part, FileRegion):
            raise TypeError(f"response part of type {type(part).__name__}")
        elif part.length < SENDFILE_MIN_BYTES or sock is None:
            pending.append(part.read())
        else:
            if pending:
                writer.write(b"".join(pending))
                pending = []
            await _drain_completely(writer)
            await _sendfile(sock.fileno(), part)
    if pending:
        writer.write(b"".join(pending))


async def _drain_completely(writer: asyncio.StreamWriter) -> None:
    transport = writer.transport
    while transport.get_write_buffer_size() > 0:
        await writer.drain()
        if transport.get_write_buffer_size() > 0:
            await asyncio.sleep(0.0005)
        if transport.is_closing():
            raise ConnectionError("connection closed while sending")


async def _sendfile(sock_fd: int, region: FileRegion) -> None:
    loop = asyncio.get_running_loop()
    fd = os.dup(sock_fd)  # our own descriptor: the event loop keeps watching the original
    try:
        offset, remaining = region.position, region.length
        while remaining > 0:
            try:
                sent = os.sendfile(fd, region.fd, offset, remaining)
            except BlockingIOError:
                sent = -1
            if sent == 0:
                raise ConnectionError("segment file ended before the region did")
            if sent < 0:
                await _writable(loop, fd)
                continue
            offset += sent
            remaining -= sent
    finally:
        os.close(fd)


async def _writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, ready)
    try:
        await fut
    finally:
        loop.remove_writer(fd)
