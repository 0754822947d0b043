"""Start the console: the web server, and the samplers behind its plots."""

from __future__ import annotations

import asyncio
import contextlib
import signal

from aiohttp import web

from headrace.console.app import Settings, make_app
from headrace.console.history import History, sample_groups, sample_pipelines

READY_PREFIX = "headrace console on "


async def serve(settings: Settings, host: str, port: int, interval: float = 5.0,
                stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM); prints ``headrace console on URL``
    once it listens."""
    history = History(interval)
    # Open live tails would hold a shutdown for a minute (aiohttp's default): 2 s is enough.
    runner = web.AppRunner(make_app(settings, history), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    print(f"{READY_PREFIX}http://{host}:{bound}/", flush=True)

    def sample() -> None:
        sample_groups(history, settings.bootstrap_servers)
        if settings.pipeline_metrics:
            sample_pipelines(history, settings.pipeline_metrics)

    sampler = asyncio.get_running_loop().create_task(history.run(sample))
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        await runner.cleanup()
