"""The broker process: accepts connections, frames requests, dispatches to handlers.

Each connection is served in order, one request at a time, as Kafka does: responses go
out in request order (clients pipeline requests and rely on it) and a long-polling
Fetch holds back later requests on its own connection only. A malformed frame, an
unknown API key or an unservable version closes that one connection; the broker goes
on serving everyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import struct
import time
from typing import Any

from headrace.broker import handlers
from headrace.broker.config import BrokerConfig
from headrace.broker.context import RequestContext
from headrace.broker.errors import FramingError
from headrace.broker.handlers.api_versions import unsupported_version_response
from headrace.broker.registry import API_TABLE, ApiSpec
from headrace.broker.sendfile import FramedResponse, write_parts
from headrace.broker.state import AppendNotifier, BrokerState, GroupCommitFlusher
from headrace.storage.manager import LogManager

log = logging.getLogger("headrace.broker")

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
_CORRELATION = struct.Struct(">i")
API_VERSIONS_KEY = 18
RETENTION_CHECK_SECONDS = 30.0

handlers.load_all()


class RequestHeader:
    __slots__ = ("api_key", "api_version", "client_id", "correlation_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise FramingError("bad varint in request header")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def parse_request_header(frame: bytes, flexible_for: dict[int, ApiSpec]) -> tuple[RequestHeader, int]:
    """Parse a request header (v1, or v2 with tagged fields for flexible versions).

    Returns the header and the position where the body starts. Raises ``FramingError``.
    """
    if len(frame) < 10:
        raise FramingError(f"request frame of {len(frame)} bytes is too short for a header")
    api_key, api_version, correlation_id = _HEADER.unpack_from(frame, 0)
    (n,) = struct.unpack_from(">h", frame, 8)
    pos = 10
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(frame):
            raise FramingError("client_id runs past the end of the frame")
        client_id = frame[pos : pos + n].decode("utf-8", "replace")
        pos += n
    spec = flexible_for.get(api_key)
    if spec is not None and 0 <= api_version <= spec.max_version and spec.flexible(api_version):
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise FramingError("tagged fields run past the end of the frame")
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


class Connection:
    """One client connection; ``serve`` runs until the peer closes or misbehaves."""

    def __init__(self, state: BrokerState, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.state = state
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    async def serve(self) -> None:
        try:
            while True:
                try:
                    size_bytes = await self.reader.readexactly(4)
                except asyncio.IncompleteReadError:
                    return
                (size,) = _SIZE.unpack(size_bytes)
                if size < 0 or size > self.state.config.max_request_bytes:
                    log.warning("%s: frame of %d bytes rejected (limit %d); closing",
                                self.peer, size, self.state.config.max_request_bytes)
                    return
                frame = await self.reader.readexactly(size)
                if not await self._dispatch(frame):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        except FramingError as e:
            log.warning("%s: %s; closing", self.peer, e)
        except Exception:  # supervisor: one bad request never takes the broker down
            log.exception("%s: request failed; closing the connection", self.peer)
        finally:
            with contextlib.suppress(Exception):
                self.writer.close()

    async def _dispatch(self, frame: bytes) -> bool:
        header, body_pos = parse_request_header(frame, API_TABLE)
        spec = API_TABLE.get(header.api_key)
        if spec is None:
            raise FramingError(f"unknown API key {header.api_key}")
        version = header.api_version
        if header.api_key == API_VERSIONS_KEY and not 0 <= version <= spec.max_version:
            # KIP-511: answer in v0 with UNSUPPORTED_VERSION and the table, so the
            # client can retry with a version we serve.
            self._send(header, unsupported_version_response(), 0, flexible=False)
            return True
        if not 0 <= version <= spec.max_version:
            raise FramingError(
                f"API key {header.api_key} version {version} not served (0-{spec.max_version})")
        try:
            request = spec.request_class.decode(memoryview(frame)[body_pos:], version=version)
        except Exception as e:
            raise FramingError(f"undecodable {spec.request_class.__name__} v{version}: {e}") from e
        ctx = RequestContext(self.state, header.api_version, header.client_id, self.peer)
        response = await spec.handle(ctx, request)
        if response is None:
            return True
        flexible = spec.flexible(version) and header.api_key != API_VERSIONS_KEY
        if isinstance(response, FramedResponse):
            try:
                head = self._head(header, flexible)
                self.writer.write(_SIZE.pack(len(head) + response.size) + head)
                await write_parts(self.writer, response.parts)
            finally:
                response.close()
        else:
            self._send(header, response, version, flexible)
        if self.writer.transport.get_write_buffer_size() > 4 * 1024 * 1024:
            await self.writer.drain()
        return True

    @staticmethod
    def _head(header: RequestHeader, flexible: bool) -> bytes:
        return _CORRELATION.pack(header.correlation_id) + (b"\x00" if flexible else b"")

    def _send(self, header: RequestHeader, response: Any, version: int, flexible: bool) -> None:
        body = response.encode(version=version)
        head = self._head(header, flexible)
        self.writer.write(_SIZE.pack(len(head) + len(body)) + head)
        self.writer.write(body)


async def serve(config: BrokerConfig, stop: asyncio.Event | None = None) -> None:
    """Run a broker until ``stop`` is set (or SIGINT/SIGTERM when ``stop`` is None)."""
    started = time.monotonic()
    logs = LogManager(config.data_dir, config.log)
    if logs.recovered_uncleanly:
        log.warning("recovered after an unclean shutdown; truncated %d torn bytes",
                    logs.truncated_bytes)
    state = BrokerState(config, logs, AppendNotifier(), GroupCommitFlusher())
    connections: set[asyncio.Task[None]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections.add(task)
        try:
            await Connection(state, reader, writer).serve()
        finally:
            connections.discard(task)

    server = await asyncio.start_server(on_connect, config.host, config.port,
                                        limit=1024 * 1024, backlog=1024)
    sockname = server.sockets[0].getsockname()
    state.port = int(sockname[1])
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    retention = loop.create_task(_retention_loop(state))
    print(f"headrace broker listening on {config.host}:{state.port}", flush=True)
    log.info("started in %.2fs with %d topics from %s", time.monotonic() - started,
             len(logs.topics), config.data_dir)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        retention.cancel()
        server.close()
        for task in list(connections):
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        logs.close()
        print("headrace broker stopped", flush=True)


async def _retention_loop(state: BrokerState) -> None:
    while True:
        await asyncio.sleep(RETENTION_CHECK_SECONDS)
        now_ms = int(time.time() * 1000)
        for partition_log in state.logs.all_logs():
            try:
                partition_log.enforce_retention(now_ms)
            except OSError:
                log.exception("retention failed for %s", partition_log.directory)


def run(config: BrokerConfig) -> None:
    """Run a broker in the foreground on uvloop until SIGINT/SIGTERM. Blocks."""
    import uvloop

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvloop.run(serve(config))
