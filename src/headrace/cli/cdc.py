"""``headrace cdc ...``: run the PostgreSQL connector, or show where it stands."""

from __future__ import annotations

import signal
import threading
import time
from typing import Annotated

import typer
from rich.markup import escape

from headrace.cli.cdc_mysql import mysql_command
from headrace.cli.terminal import BootstrapServers, ClientConfig, print_error, stderr, stdout
from headrace.ops.clients import DEFAULT_BOOTSTRAP_SERVERS, client_settings

app = typer.Typer(name="cdc", help="Change data capture from PostgreSQL or MySQL/MariaDB into "
                                   "the log.", no_args_is_help=True)

Dsn = Annotated[str, typer.Option(help="libpq connection string, e.g. 'host=... dbname=... "
                                       "user=...'.")]
Slot = Annotated[str, typer.Option(help="Replication slot (and the connector's identity).")]


@app.command("postgres")
def postgres_command(
    dsn: Dsn,
    tables: Annotated[str, typer.Option(help="Comma-separated schema.table list to capture.")],
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
    topic_prefix: Annotated[str, typer.Option(help="Topics are PREFIX.schema.table.")] = "headrace",
    snapshot: Annotated[str, typer.Option(help="initial, never, always or initial_only.")] = "initial",
    slot: Slot = "headrace",
    publication: Annotated[str, typer.Option(help="Publication to create or reset.")] = "headrace",
    heartbeat_s: Annotated[float, typer.Option("--heartbeat-seconds", min=0.1,
                                               help="Heartbeat interval when idle.")] = 10.0,
    decimal_handling: Annotated[str, typer.Option(
        "--decimal-handling-mode", "--decimal-handling",
        help="Debezium's decimal.handling.mode: numeric and money as precise (the default: "
             "base64 of the unscaled value), string or double.")] = "precise",
    time_precision: Annotated[str, typer.Option(
        "--time-precision-mode",
        help="Debezium's time.precision.mode: adaptive (the default: the column's "
             "precision decides milli- or microseconds) or connect (milliseconds).")
    ] = "adaptive",
    schema_registry: Annotated[str, typer.Option(
        help="Write keys and values as Avro through this schema registry URL "
             "(default: JSON).")] = "",
    timeout_s: Annotated[float, typer.Option(
        "--timeout-seconds", min=0.1,
        help="How long to wait for the database or the brokers before giving up.")] = 30.0,
) -> None:
    """Snapshot the tables, then stream their changes until Ctrl-C (SIGINT) or SIGTERM."""
    from headrace.cdc.connector import READY_PREFIX, CdcConfig, Connector
    from headrace.cdc.values import DECIMAL_MODES, TIME_MODES

    if decimal_handling not in DECIMAL_MODES:
        raise typer.BadParameter(f"one of {', '.join(DECIMAL_MODES)}",
                                 param_hint="'--decimal-handling-mode'")
    if time_precision not in TIME_MODES:
        raise typer.BadParameter(f"one of {', '.join(TIME_MODES)}",
                                 param_hint="'--time-precision-mode'")
    names = tuple(t.strip() for t in tables.split(",") if t.strip())
    if not names:
        raise typer.BadParameter("name at least one table", param_hint="'--tables'")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    config = CdcConfig(dsn, names, bootstrap_servers, topic_prefix, snapshot, slot, publication,
                       heartbeat_s, decimal_handling, schema_registry_url=schema_registry,
                       client_config=client_settings(), time_precision_mode=time_precision,
                       timeout_s=timeout_s)
    Connector(config).run(stop, on_ready=lambda lsn: print(
        f"{READY_PREFIX}from {lsn} ({', '.join(names)} -> {topic_prefix}.*)", flush=True))


@app.command("status")
def status(
    dsn: Dsn,
    slot: Slot = "headrace",
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
    offsets_topic: Annotated[str, typer.Option(help="The connector's offsets topic.")] =
        "__headrace_cdc_offsets",
    warn_retained_mb: Annotated[float, typer.Option(
        min=0, help="Warn (exit status 2) when the slot retains more WAL than this "
                    "(MySQL: when the connector is this far behind in the binlog).")] = 1024,
    name: Annotated[str, typer.Option(help="MySQL/MariaDB (a mysql:// DSN): the "
                                           "connector's --name.")] = "headrace-mysql",
) -> None:
    """The slot, its lag behind the server (bytes and seconds), the WAL it retains, and
    what the log holds. Exit status 1: no such slot; 2: the retained WAL passed
    --warn-retained-mb or the slot is lost. With a mysql:// DSN: the connector ``--name``'s
    binlog position against the server's, its lag in bytes, seconds since its last write;
    exit status 1: nothing written yet; 2: behind more than --warn-retained-mb, or its
    binlog file is purged."""
    from headrace.cdc import kafka_log, postgres

    if dsn.startswith(("mysql://", "mariadb://")):
        from headrace.cli.cdc_mysql import mysql_status

        mysql_status(dsn, name, bootstrap_servers, offsets_topic, warn_retained_mb)
        return

    db = postgres.connect(dsn)
    state = postgres.slot_state(db, slot)
    db.close()
    if not state.exists:
        stdout.print(f"slot {escape(slot)}: none")
        raise typer.Exit(1)
    offsets = kafka_log.last_offsets_record(
        kafka_log.kafka_config(bootstrap_servers, client_settings()), offsets_topic,
        slot.encode(), timeout_s=30.0)
    since_write = None if offsets is None else max(0.0, time.time() - offsets["ts_ms"] / 1000)
    lag_s: float | None
    if not state.lag_bytes:
        lag_s, how = 0.0, "caught up"
    elif state.active:
        lag_s, how = state.flush_lag_s or 0.0, "connector streaming"
    else:  # nobody confirms: what was committed since the last write waits
        lag_s, how = since_write, "connector not running"
    lag = "-" if lag_s is None else f"{lag_s:.1f} s"
    stdout.print(f"slot {escape(slot)}: confirmed {state.confirmed_flush_lsn}, server at "
                 f"{state.current_lsn}, lag {state.lag_bytes} bytes, {lag} ({how}), "
                 f"WAL retained {state.retained_bytes} bytes, status {state.wal_status}")
    if offsets is None:
        stdout.print("log: nothing written yet")
    else:
        stdout.print(f"log: everything up to LSN {offsets['lsn']}, snapshot "
                     f"{'done' if offsets['snapshot_done'] else 'not done'}; "
                     f"{since_write:.1f} s since the last write")
        for topic, count in sorted((offsets.get("events") or {}).items()):
            stdout.print(f"  {escape(topic)}: {count} change events")
    retained_mb = (state.retained_bytes or 0) / 1_000_000
    if state.wal_status == "lost":
        print_error(f"slot {slot} is lost (its WAL was removed): re-snapshot with "
                    "--snapshot always")
        raise typer.Exit(2)
    if retained_mb > warn_retained_mb:
        why = "the connector is not running" if not state.active else "the connector is behind"
        stderr.print(f"[bold yellow]warning:[/bold yellow] slot {escape(slot)} retains "
                     f"{retained_mb:.1f} MB of WAL (more than --warn-retained-mb "
                     f"{warn_retained_mb:g}): {why}", soft_wrap=True)
        raise typer.Exit(2)


app.command("mysql")(mysql_command)
