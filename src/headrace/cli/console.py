"""``headrace console``: the web console (``headrace.console``)."""

from __future__ import annotations

from typing import Annotated

import typer

from headrace.cli.terminal import BootstrapServers, ClientConfig
from headrace.ops.clients import DEFAULT_BOOTSTRAP_SERVERS


def console(
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
    registry: Annotated[str, typer.Option(
        help="Schema registry URL: decodes registry-encoded values, lists schemas.")] = "",
    pipeline_metrics: Annotated[list[str] | None, typer.Option(
        "--pipeline-metrics", help="A pipeline metrics URL to plot (repeatable).")] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="HTTP port; 0 picks a free one.")]
    = 8080,
    sample_seconds: Annotated[float, typer.Option(
        min=0.2, help="How often lag and pipeline metrics are sampled for the plots.")] = 5.0,
) -> None:
    """Serve the web console for the cluster at --bootstrap-servers until Ctrl-C."""
    import asyncio

    from headrace.console.app import Settings
    from headrace.console.server import serve
    from headrace.ops.errors import OpsError

    settings = Settings(bootstrap_servers, registry, list(pipeline_metrics or []))
    try:
        asyncio.run(serve(settings, host, port, sample_seconds))
    except OSError as e:
        raise OpsError(f"the console could not listen on {host}:{port}: {e}") from e
