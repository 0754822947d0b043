"""``headrace cdc mysql``: run the MySQL/MariaDB connector (registered on ``cdc``'s app)."""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer

from headrace.cli.terminal import BootstrapServers, ClientConfig
from headrace.ops.clients import DEFAULT_BOOTSTRAP_SERVERS, client_settings


def mysql_command(
    dsn: Annotated[str, typer.Option(
        help="mysql://user:password@host:port/database (the database of unqualified "
             "tables).")],
    tables: Annotated[str, typer.Option(help="Comma-separated database.table list to "
                                             "capture.")],
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
    topic_prefix: Annotated[str, typer.Option(help="Topics are PREFIX.database.table.")] =
        "headrace",
    snapshot: Annotated[str, typer.Option(help="initial, never, always or initial_only.")] =
        "initial",
    name: Annotated[str, typer.Option(help="The connector's identity (its offsets and "
                                           "transactional id).")] = "headrace-mysql",
    server_id: Annotated[int, typer.Option(min=1, max=2**32 - 1, help=
        "Replica server id to read the binlog as (unique among the server's replicas).")] =
        5401,
    heartbeat_s: Annotated[float, typer.Option("--heartbeat-seconds", min=0.1,
                                               help="How often the binlog position is recorded while the captured tables are idle.")] =
        1.0,
    timeout_s: Annotated[float, typer.Option("--timeout-seconds", min=0.1,
                                             help="How long a Kafka operation may take "
                                                  "(an unreachable broker: an error after "
                                                  "this).")] = 30.0,
) -> None:
    """Snapshot MySQL/MariaDB tables, then stream their binlog changes until SIGINT/SIGTERM."""
    from headrace.cdc.connector import READY_PREFIX
    from headrace.cdc.mysql_connector import MySqlConfig, MySqlConnector

    names = tuple(t.strip() for t in tables.split(",") if t.strip())
    if not names:
        raise typer.BadParameter("name at least one table", param_hint="'--tables'")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    config = MySqlConfig(dsn, names, bootstrap_servers, topic_prefix, snapshot, name,
                         server_id, heartbeat_s, client_config=client_settings(),
                         timeout_s=timeout_s)
    MySqlConnector(config).run(stop, on_ready=lambda position: print(
        f"{READY_PREFIX}from {position} ({', '.join(names)} -> {topic_prefix}.*)",
        flush=True))
