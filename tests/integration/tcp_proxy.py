"""A Kafka-aware TCP proxy for tests: forwards frames both ways and can lose responses.

``KafkaProxy(listen, upstream, drop=policy)`` listens on ``listen`` (host, port) and
opens one upstream connection per client connection. Requests are forwarded as they
come; each response is matched with its request (Kafka answers in order on a
connection) and ``policy(api_key)`` decides whether to deliver it. A dropped response
closes both connections instead, after the broker has done the work: the client sees
a broken connection with requests in flight, and must retry them.

Clients reach the broker through the proxy only if the broker advertises the proxy's
address. The broker advertises its own port, so the proxy listens on the same port on
another loopback address: run the broker on ``127.0.0.1`` with ``--advertised-host
127.0.0.2`` and the proxy on ``127.0.0.2`` (same port). Not supported: ``acks=0``
produce requests (they have no response, which breaks the pairing).

The proxy runs its own event loop on a daemon thread; ``start``/``stop`` block.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections import Counter, deque
from collections.abc import Callable

from headrace.testing import scaled

Address = tuple[str, int]


class KafkaProxy:
    def __init__(self, listen: Address, upstream: Address,
                 drop: Callable[[int], bool] | None = None) -> None:
        self.listen = listen
        self.upstream = upstream
        self.drop = drop or (lambda api_key: False)
        self.dropped: Counter[int] = Counter()  # api key -> responses dropped
        self.forwarded: Counter[int] = Counter()  # api key -> responses delivered
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"{self.listen[0]}:{self.listen[1]}"

    def start(self) -> KafkaProxy:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._serve, *self.listen))
            except OSError as e:
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="kafka-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        self._thread.join(scaled(10))

    def __enter__(self) -> KafkaProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, client_reader: asyncio.StreamReader,
                     client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.close()
            self._tasks.discard(task)
            return
        in_flight: deque[tuple[int, int]] = deque()  # (api key, correlation id)

        async def requests() -> None:
            while True:
                head = await client_reader.readexactly(4)
                body = await client_reader.readexactly(struct.unpack(">i", head)[0])
                api_key, _, correlation_id = struct.unpack_from(">hhi", body)
                in_flight.append((api_key, correlation_id))
                up_writer.write(head + body)
                await up_writer.drain()

        async def responses() -> None:
            while True:
                head = await up_reader.readexactly(4)
                body = await up_reader.readexactly(struct.unpack(">i", head)[0])
                (correlation_id,) = struct.unpack_from(">i", body)
                api_key, expected = in_flight.popleft()
                if correlation_id != expected:
                    raise RuntimeError(f"response {correlation_id} does not match {expected}")
                if self.drop(api_key):
                    self.dropped[api_key] += 1
                    return  # closes both connections below
                self.forwarded[api_key] += 1
                client_writer.write(head + body)
                await client_writer.drain()

        pumps = [asyncio.ensure_future(requests()), asyncio.ensure_future(responses())]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for writer in (client_writer, up_writer):
                writer.transport.abort()
            self._tasks.discard(task)
