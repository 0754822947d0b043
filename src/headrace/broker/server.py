"""The broker process: storage recovery, the listening socket, signals, shutdown.

Each accepted connection is served by ``headrace.broker.connection.Connection``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable

from headrace.broker import handlers
from headrace.broker.cleaner_task import run_cleaner
from headrace.broker.config import BrokerConfig
from headrace.broker.connection import Connection
from headrace.broker.counters import NullMetrics
from headrace.broker.listeners import BoundListener, server_context
from headrace.broker.metrics import serve_metrics
from headrace.broker.state import BrokerState
from headrace.storage.tiered_log import delete_tiered_local

log = logging.getLogger("headrace.broker")

TXN_TIMEOUT_CHECK_SECONDS = 1.0
LISTENER_PREFIX = "headrace broker listener "

handlers.load_all()


async def serve(config: BrokerConfig, stop: asyncio.Event | None = None,
                on_listening: Callable[[int], None] | None = None) -> None:
    """Run a broker until ``stop`` is set (or SIGINT/SIGTERM when ``stop`` is None).
    ``on_listening(port)`` is called once the broker accepts connections."""
    started = time.monotonic()
    state = BrokerState.open(config)
    if config.metrics_port is None:
        state.metrics = NullMetrics()
    logs = state.logs
    if logs.recovered_uncleanly:
        log.warning("recovered after an unclean shutdown; truncated %d torn bytes",
                    logs.truncated_bytes)
    connections: set[asyncio.Task[None]] = set()

    by_port: dict[int, BoundListener] = {}

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections.add(task)
        try:
            listener = by_port[int(writer.get_extra_info("sockname")[1])]
            await Connection(state, reader, writer, listener).serve()
        except asyncio.CancelledError:
            # Shutdown cancels connections; ending quietly here keeps asyncio's stream
            # callback from logging the cancellation as an error.
            writer.transport.abort()
        finally:
            connections.discard(task)

    servers: list[asyncio.Server] = []
    for listener in config.effective_listeners():
        tls = (server_context(config.ssl, listener.client_auth(config.ssl.client_auth))
               if listener.uses_tls else None)
        server = await asyncio.start_server(
            on_connect, listener.host, listener.port, limit=1024 * 1024, backlog=1024,
            ssl=tls, ssl_handshake_timeout=config.ssl.handshake_timeout_s if tls else None)
        port = int(server.sockets[0].getsockname()[1])
        bound = BoundListener(listener.name, listener.security_protocol,
                              listener.advertised_host or listener.host, port)
        by_port[port] = bound
        state.listeners.append(bound)
        servers.append(server)
    state.port = state.listeners[0].port
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    background = [loop.create_task(_retention_loop(state)),
                  loop.create_task(state.groups.run()),
                  loop.create_task(state.consumer_groups.run()),
                  loop.create_task(_transaction_timeouts(state)),
                  loop.create_task(_offsets_retention_loop(state))]
    if config.cleaner.enabled:
        background.append(loop.create_task(run_cleaner(state)))
    if state.remote is not None:
        background.append(loop.create_task(state.remote.run()))
    metrics_server = None
    if config.metrics_port is not None:
        metrics_server = await serve_metrics(state, config.host, config.metrics_port)
        metrics_port = metrics_server.sockets[0].getsockname()[1]
        print(f"headrace broker metrics on http://{config.host}:{metrics_port}/metrics",
              flush=True)
    for bound in state.listeners[1:]:
        print(f"{LISTENER_PREFIX}{bound.name} ({bound.security_protocol}) on "
              f"{bound.advertised_host}:{bound.port}", flush=True)
    first = config.effective_listeners()[0]
    print(f"headrace broker listening on {first.host}:{state.port}", flush=True)
    if on_listening is not None:
        on_listening(state.port)
    log.info("started in %.2fs with %d topics from %s", time.monotonic() - started,
             len(logs.topics), config.data_dir)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        if metrics_server is not None:
            metrics_server.close()
        for server in servers:
            server.close()
        for task in list(connections):
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        logs.close()
        if state.remote is not None:
            state.remote.close()
        print("headrace broker stopped", flush=True)


async def _transaction_timeouts(state: BrokerState) -> None:
    while True:
        await asyncio.sleep(TXN_TIMEOUT_CHECK_SECONDS)
        try:
            state.txns.sweep()
        except Exception:  # supervisor: a failed sweep must not stop the next ones
            log.exception("transaction timeout sweep failed")


async def _offsets_retention_loop(state: BrokerState) -> None:
    """Committed-offset expiry (``offsets.retention.minutes``), every
    ``offsets_retention_check_interval_ms``."""
    while True:
        await asyncio.sleep(state.config.offsets_retention_check_interval_ms / 1000.0)
        try:
            state.expire_offsets(int(time.time() * 1000))
        except Exception:  # supervisor: a failed pass must not stop the next ones
            log.exception("offsets retention failed")


async def _retention_loop(state: BrokerState) -> None:
    """Retention (time, size, log start offset) and producer-id expiry, every
    ``retention_check_interval_ms``."""
    while True:
        await asyncio.sleep(state.config.retention_check_interval_ms / 1000.0)
        now_ms = int(time.time() * 1000)
        for partition_log in state.logs.all_logs():
            try:
                partition_log.enforce_retention(now_ms)
                if partition_log.remote is not None and partition_log.config.remote_storage_enable:
                    delete_tiered_local(partition_log, now_ms)
                partition_log.expire_producers(now_ms)
            except OSError:
                log.exception("retention failed for %s", partition_log.directory)


def run(config: BrokerConfig, on_listening: Callable[[int], None] | None = None) -> None:
    """Run a broker in the foreground on uvloop until SIGINT/SIGTERM. Blocks."""
    import uvloop

    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvloop.run(serve(config, on_listening=on_listening))
