"""Running a registry: replay ``_schemas``, then serve HTTP until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from headrace.registry.http import build_app
from headrace.registry.service import RegistryService
from headrace.registry.store import DEFAULT_TOPIC, SchemaStore

READY_PREFIX = "headrace registry listening on "


@dataclass(frozen=True)
class RegistryConfig:
    """Where the registry keeps its records and where it listens."""

    bootstrap_servers: str
    host: str = "127.0.0.1"
    port: int = 8081
    topic: str = DEFAULT_TOPIC
    group: str = "headrace-schema-registry"
    client_config: dict[str, Any] = field(default_factory=dict)
    timeout: float = 30.0


async def serve(config: RegistryConfig, stop: asyncio.Event | None = None) -> None:
    """Replay the topic (blocking start-up, in a thread), then serve until ``stop`` is set
    (or SIGINT/SIGTERM when ``stop`` is None). Prints the ready line with the real port."""
    store = SchemaStore(config.bootstrap_servers, config.topic, config.group,
                        config.client_config, config.timeout)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, store.start)
    runner = web.AppRunner(build_app(RegistryService(store)), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    port = runner.addresses[0][1]
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    print(f"{READY_PREFIX}http://{config.host}:{port} (schemas in {config.topic} on "
          f"{config.bootstrap_servers})", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        store.close()
        print("headrace registry stopped", flush=True)


def run(config: RegistryConfig, log_level: str = "WARNING") -> None:
    """Run a registry in the foreground. Blocks."""
    logging.basicConfig(level=log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(config))
