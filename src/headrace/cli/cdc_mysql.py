"""``headrace cdc mysql``: run the MySQL/MariaDB connector (registered on ``cdc``'s app)."""

from __future__ import annotations

import signal
import threading
import time
from typing import Annotated

import typer
from rich.markup import escape

from headrace.cli.terminal import BootstrapServers, ClientConfig, print_error, stderr, stdout
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
    decimal_handling: Annotated[str, typer.Option(
        "--decimal-handling-mode", "--decimal-handling",
        help="Debezium's decimal.handling.mode: DECIMAL as precise (the default: base64 of "
             "the unscaled value), string or double.")] = "precise",
    time_precision: Annotated[str, typer.Option(
        "--time-precision-mode",
        help="Debezium's time.precision.mode for MySQL: adaptive_time_microseconds (the "
             "default: DATETIME's precision decides milli- or microseconds, TIME in "
             "microseconds) or connect (milliseconds).")] = "adaptive_time_microseconds",
    schema_registry: Annotated[str, typer.Option(
        help="Write keys and values as Avro through this schema registry URL "
             "(default: JSON).")] = "",
    timeout_s: Annotated[float, typer.Option("--timeout-seconds", min=0.1,
                                             help="How long a Kafka operation may take "
                                                  "(an unreachable broker: an error after "
                                                  "this).")] = 30.0,
) -> None:
    """Snapshot MySQL/MariaDB tables, then stream their binlog changes until SIGINT/SIGTERM."""
    from headrace.cdc.connector import READY_PREFIX
    from headrace.cdc.mysql_connector import MySqlConfig, MySqlConnector
    from headrace.cdc.mysql_values import DECIMAL_MODES, TIME_MODES, Modes

    if decimal_handling not in DECIMAL_MODES:
        raise typer.BadParameter(f"one of {', '.join(DECIMAL_MODES)}",
                                 param_hint="'--decimal-handling-mode'")
    if time_precision not in TIME_MODES:
        hint = (" (Debezium's MySQL connector no longer supports adaptive)"
                if time_precision == "adaptive" else "")
        raise typer.BadParameter(f"one of {', '.join(TIME_MODES)}{hint}",
                                 param_hint="'--time-precision-mode'")

    names = tuple(t.strip() for t in tables.split(",") if t.strip())
    if not names:
        raise typer.BadParameter("name at least one table", param_hint="'--tables'")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    config = MySqlConfig(dsn, names, bootstrap_servers, topic_prefix, snapshot, name,
                         server_id, heartbeat_s, client_config=client_settings(),
                         timeout_s=timeout_s, modes=Modes(decimal_handling, time_precision),
                         schema_registry_url=schema_registry)
    MySqlConnector(config).run(stop, on_ready=lambda position: print(
        f"{READY_PREFIX}from {position} ({', '.join(names)} -> {topic_prefix}.*)",
        flush=True))


def mysql_status(dsn: str, name: str, bootstrap_servers: str, offsets_topic: str,
                 warn_behind_mb: float) -> None:
    """``headrace cdc status --dsn mysql://...``: where connector ``name``'s log stands
    against the server's binlog. Exit status 1: nothing written yet; 2: its binlog file
    is purged, or it is more than ``warn_behind_mb`` behind."""
    from headrace.cdc import kafka_log, mysql

    parsed = mysql.Dsn.parse(dsn)
    offsets = kafka_log.last_offsets_record(
        kafka_log.kafka_config(bootstrap_servers, client_settings()), offsets_topic,
        name.encode(), timeout_s=30.0)
    if offsets is None or "file" not in offsets:
        stdout.print(f"connector {escape(name)}: nothing written yet")
        raise typer.Exit(1)
    stored = mysql.Position(str(offsets["file"]), int(offsets["pos"]))
    db = mysql.connect(parsed)
    try:
        server = mysql.current_position(db)
        behind = mysql.binlog_behind(db, stored)
    finally:
        db.close()
    since_write = max(0.0, time.time() - offsets["ts_ms"] / 1000)
    gtid = f" (GTID {offsets['gtid']})" if offsets.get("gtid") else ""
    lag = "its binlog file is purged" if behind is None else f"lag {behind} bytes"
    stdout.print(f"connector {escape(name)}: at {stored.file}:{stored.pos}{escape(gtid)}, "
                 f"server at {server.file}:{server.pos}, {lag}", soft_wrap=True)
    stdout.print(f"log: snapshot {'done' if offsets['snapshot_done'] else 'not done'}; "
                 f"{since_write:.1f} s since the last write", soft_wrap=True)
    for topic, count in sorted((offsets.get("events") or {}).items()):
        stdout.print(f"  {escape(topic)}: {count} change events", soft_wrap=True)
    if behind is None:
        print_error(f"the binlog file {stored.file} connector {name} resumes from is purged "
                    "from the server: re-snapshot with --snapshot always")
        raise typer.Exit(2)
    if behind / 1_000_000 > warn_behind_mb:
        stderr.print(f"[bold yellow]warning:[/bold yellow] connector {escape(name)} is "
                     f"{behind / 1_000_000:.1f} MB of binlog behind the server (more than "
                     f"--warn-retained-mb {warn_behind_mb:g})", soft_wrap=True)
        raise typer.Exit(2)
