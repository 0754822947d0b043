"""One client connection: framing, dispatch, and responses in request order.

Requests are handled one at a time, in order, as Kafka does: a long-polling Fetch holds
back later requests on its own connection only. A handler may answer with a
``DeferredResponse`` (Produce waiting for its fsync): the connection then goes on with the
next request while a writer task sends responses strictly in request order, each when it
is ready, so pipelined produce requests share fsyncs. A malformed frame, an unknown API
key or an unservable version closes that one connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from dataclasses import dataclass
from typing import Any

from headrace.broker.context import RequestContext, Session
from headrace.broker.errors import FramingError
from headrace.broker.handlers.api_versions import unsupported_version_response
from headrace.broker.listeners import BoundListener, principal_of
from headrace.broker.registry import API_TABLE, DeferredResponse, is_flexible
from headrace.broker.sendfile import FramedResponse, write_parts
from headrace.broker.state import BrokerState
from headrace.protocol.errors import ProtocolError
from headrace.protocol.request_header import RequestHeader, parse_request_header

log = logging.getLogger("headrace.broker")

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
API_VERSIONS_KEY = 18
# What a client may send on a SASL listener before it authenticated (as Kafka):
# ApiVersions, SaslHandshake, SaslAuthenticate.
SASL_OPEN_KEYS = frozenset({18, 17, 36})
# Responses waiting to be written per connection before the reader stops reading.
MAX_QUEUED_RESPONSES = 64


@dataclass(slots=True)
class _Outgoing:
    header: RequestHeader
    version: int
    flexible: bool
    response: Any


class Connection:
    """Serves one client until it closes or misbehaves. ``serve`` never raises."""

    def __init__(self, state: BrokerState, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, listener: BoundListener) -> None:
        self.state = state
        self.listener = listener
        self.session = Session(principal_of(writer.get_extra_info("ssl_object")),
                               authenticated=not listener.uses_sasl)
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._out: asyncio.Queue[_Outgoing | None] = asyncio.Queue(MAX_QUEUED_RESPONSES)

    async def serve(self) -> None:
        writer_task = asyncio.get_running_loop().create_task(self._write_loop())
        metrics = self.state.metrics
        metrics.connections_active += 1
        metrics.connections_total += 1
        try:
            await self._read_loop()
            # Peer finished sending: answer what it asked for, then close.
            await self._out.put(None)
            await writer_task
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except (FramingError, ProtocolError) as e:
            log.warning("%s: %s; closing", self.peer, e)
        except Exception:  # supervisor: one bad request never takes the broker down
            log.exception("%s: request failed; closing the connection", self.peer)
        finally:
            metrics.connections_active -= 1
            writer_task.cancel()
            with contextlib.suppress(BaseException):
                await writer_task
            self._drop_queued()
            with contextlib.suppress(Exception):
                self.writer.close()

    async def _read_loop(self) -> None:
        limit = self.state.config.max_request_bytes
        while True:
            try:
                size_bytes = await self.reader.readexactly(4)
            except asyncio.IncompleteReadError:
                return
            (size,) = _SIZE.unpack(size_bytes)
            if size < 0 or size > limit:
                raise FramingError(f"frame of {size} bytes rejected (limit {limit})")
            frame = await self.reader.readexactly(size)
            outgoing = await self._dispatch(frame)
            if outgoing is not None:
                await self._out.put(outgoing)
            if self.session.close_after:
                log.info("%s: SASL authentication failed; closing", self.peer)
                return

    async def _dispatch(self, frame: bytes) -> _Outgoing | None:
        header, body_pos = parse_request_header(frame, is_flexible)
        spec = API_TABLE.get(header.api_key)
        if spec is None:
            raise FramingError(f"unknown API key {header.api_key}")
        version = header.api_version
        if header.api_key == API_VERSIONS_KEY and not 0 <= version <= spec.max_version:
            # KIP-511: answer in v0 with UNSUPPORTED_VERSION and the table, so the client
            # can retry with a version we serve.
            return _Outgoing(header, 0, False, unsupported_version_response())
        if not spec.serves(version):
            raise FramingError(f"API key {header.api_key} version {version} not served "
                               f"({spec.min_version}-{spec.max_version})")
        try:
            request = spec.request_class.decode(memoryview(frame)[body_pos:], version=version)
        except Exception as e:
            raise FramingError(f"undecodable {spec.request_class.__name__} v{version}: {e}") from e
        if header.api_key not in SASL_OPEN_KEYS:
            if not self.session.authenticated:
                raise FramingError(f"API key {header.api_key} before SASL authentication")
            expires = self.session.expires_at
            if expires is not None and time.monotonic() > expires:
                # KIP-368: the login expired and the client did not re-authenticate
                raise FramingError(f"API key {header.api_key} after the SASL session of "
                                   f"{self.session.principal} expired")
        ctx = RequestContext(self.state, version, header.client_id, self.peer, self.listener,
                             self.session)
        started = time.perf_counter()
        response = await spec.handle(ctx, request)
        self.state.metrics.request(header.api_key, time.perf_counter() - started)
        if response is None:
            return None
        flexible = spec.flexible(version) and header.api_key != API_VERSIONS_KEY
        return _Outgoing(header, version, flexible, response)

    async def _write_loop(self) -> None:
        try:
            while (item := await self._out.get()) is not None:
                response = item.response
                if isinstance(response, DeferredResponse):
                    response = await response.result()
                head = _CORRELATION.pack(item.header.correlation_id)
                if item.flexible:
                    head += b"\x00"  # response header v1: no tagged fields
                # One write per response (one send(2) for most): the size, header and
                # body are joined rather than written one after the other.
                if isinstance(response, FramedResponse):
                    try:
                        await write_parts(self.writer, response.parts,
                                          _SIZE.pack(len(head) + response.size) + head)
                    finally:
                        response.close()
                else:
                    body = response.encode(version=item.version)
                    self.writer.write(b"".join((_SIZE.pack(len(head) + len(body)), head, body)))
                if self.writer.transport.get_write_buffer_size() > 4 * 1024 * 1024:
                    await self.writer.drain()
        except (ConnectionError, OSError) as e:
            # The client went away before its responses: normal traffic, not an error.
            log.debug("%s: peer gone while writing a response (%r); closing", self.peer, e)
            self.writer.transport.abort()  # the reader sees the close and ends too
        except asyncio.CancelledError:
            raise
        except RuntimeError as e:
            if not self.writer.transport.is_closing():
                log.exception("%s: writing a response failed; closing", self.peer)
            else:  # uvloop raises RuntimeError writing to a transport the peer closed
                log.debug("%s: peer gone while writing a response (%r); closing", self.peer, e)
            self.writer.transport.abort()
        except Exception:
            log.exception("%s: writing a response failed; closing", self.peer)
            self.writer.transport.abort()

    def _drop_queued(self) -> None:
        while not self._out.empty():
            item = self._out.get_nowait()
            if item is not None and isinstance(item.response, FramedResponse):
                item.response.close()
