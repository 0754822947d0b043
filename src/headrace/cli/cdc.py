"""``headrace cdc ...``: run the PostgreSQL connector, or show where it stands."""

from __future__ import annotations

import signal
import threading
import time
from typing import Annotated

import typer
from rich.markup import escape

from headrace.cli.terminal import BootstrapServers, ClientConfig, stdout
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
        help="numeric as precise (Debezium's default: base64), string or double.")] = "precise",
    schema_registry: Annotated[str, typer.Option(
        help="Write keys and values as Avro through this schema registry URL "
             "(default: JSON).")] = "",
) -> None:
    """Snapshot the tables, then stream their changes until Ctrl-C (SIGINT) or SIGTERM."""
    from headrace.cdc.connector import READY_PREFIX, CdcConfig, Connector
    from headrace.cdc.values import DECIMAL_MODES

    if decimal_handling not in DECIMAL_MODES:
        raise typer.BadParameter(f"one of {', '.join(DECIMAL_MODES)}",
                                 param_hint="'--decimal-handling'")
    names = tuple(t.strip() for t in tables.split(",") if t.strip())
    if not names:
        raise typer.BadParameter("name at least one table", param_hint="'--tables'")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    config = CdcConfig(dsn, names, bootstrap_servers, topic_prefix, snapshot, slot, publication,
                       heartbeat_s, decimal_handling, schema_registry_url=schema_registry,
                       client_config=client_settings())
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
) -> None:
    """The slot, its confirmed LSN, the WAL it retains, and how far behind the log is."""
    from headrace.cdc import postgres
    from headrace.cdc.connector import CdcConfig, Connector

    db = postgres.connect(dsn)
    state = postgres.slot_state(db, slot)
    if not state.exists:
        stdout.print(f"slot {escape(slot)}: none")
        raise typer.Exit(1)
    offsets = Connector(CdcConfig(dsn, (), bootstrap_servers, slot=slot,
                                  offsets_topic=offsets_topic,
                                  client_config=client_settings()))._last_offsets_record()
    with db.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        current = cur.fetchone()[0]
    lag = "-"
    if offsets is not None:
        lag = f"{max(0.0, time.time() - offsets['ts_ms'] / 1000):.1f} s since the last write"
    stdout.print(f"slot {escape(slot)}: confirmed {state.confirmed_flush_lsn}, server at "
                 f"{current}, WAL retained {state.retained_bytes} bytes, status "
                 f"{state.wal_status}")
    if offsets is None:
        stdout.print("log: nothing written yet")
        return
    stdout.print(f"log: everything up to LSN {offsets['lsn']}, snapshot "
                 f"{'done' if offsets['snapshot_done'] else 'not done'}; {lag}")
    for topic, count in sorted((offsets.get("events") or {}).items()):
        stdout.print(f"  {escape(topic)}: {count} change events")
