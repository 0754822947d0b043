"""``headrace savepoint create|inspect``: write a savepoint of a stateful query's
checkpoint, and show what one holds (``headrace.savepoints``)."""

from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from headrace.cli.terminal import print_listing, stdout

app = typer.Typer(name="savepoint", no_args_is_help=True,
                  help="Savepoints of stateful pipelines: create one, inspect one.")


@app.command("create")
def create_command(
    checkpoint: Annotated[Path, typer.Argument(help="The query's checkpoint folder.")],
    output: Annotated[Path, typer.Argument(help="The savepoint folder (must not exist).")],
    batch_id: Annotated[int | None, typer.Option(
        help="A committed batch (default: the last committed one).")] = None,
    bootstrap_servers: Annotated[str, typer.Option(
        "--bootstrap-servers", "-b",
        help="Also record the exactly-once sink's markers, read from these brokers.")] = "",
) -> None:
    """Write a savepoint of a stopped or running query, as of a committed batch: each
    operator's state, the sources' offsets, the watermark and the sink's markers. The
    folder appears complete, or not at all."""
    from headrace.savepoints import SavepointError, create
    from headrace.savepoints.checkpoint import committed_batch
    from headrace.spark.session import local_session

    # the mistakes that need no SparkSession to find, found before starting one
    if output.exists():
        raise SavepointError(f"{output} exists; a savepoint is written to a new folder")
    committed_batch(checkpoint, batch_id)
    log = Path(tempfile.gettempdir()) / "headrace-savepoint-spark.log"
    spark = local_session("headrace-savepoint", jvm_log=str(log))
    try:
        manifest = create(spark, checkpoint, output, batch_id=batch_id,
                          bootstrap_servers=bootstrap_servers or None)
    finally:
        spark.stop()
    keys = sum(o.keys for o in manifest.operators)
    size = sum(o.bytes for o in manifest.operators)
    stdout.print(f"savepoint {escape(str(output))}: batch {manifest.batch_id}, "
                 f"{len(manifest.operators)} operators, {keys} keys, {size} bytes",
                 soft_wrap=True)


@app.command("inspect")
def inspect_command(
    savepoint: Annotated[Path, typer.Argument(help="The savepoint folder.")],
    operator: Annotated[int | None, typer.Option(
        help="Show this operator's state, key by key.")] = None,
    limit: Annotated[int, typer.Option(help="With --operator: at most this many keys.")] = 20,
) -> None:
    """What a savepoint holds: operators (state schema version, keys, bytes), offsets per
    topic-partition, watermark, sink markers, the real-time sink's replay records; with ``--operator``, its state per key.
    Reads files only (no Spark); ``Savepoint(path).state(spark, id)`` gives a DataFrame."""
    # here, not at the top: pyarrow is a third of the start-up of every other command
    import pyarrow.parquet as pq

    from headrace.savepoints import Savepoint
    from headrace.savepoints.create import JVM_KEY, JVM_STATE
    from headrace.savepoints.state import decode, jvm_state, per_key

    sp = Savepoint(savepoint)
    m = sp.manifest
    if operator is not None:
        op = sp.operator(operator)
        shown = 0
        for var in op.variables:
            table = pq.read_table(savepoint / var.file)
            if JVM_STATE in table.column_names:  # the real-time rule operator: one per key
                for key, value in zip(table.column(JVM_KEY).to_pylist(),
                                      table.column(JVM_STATE).to_pylist(), strict=True):
                    if shown >= limit:
                        return
                    stdout.print(escape(f"{key!r}: {jvm_state(value)!r}"), soft_wrap=True)
                    shown += 1
                continue
            if "keys" not in table.column_names:  # rows: Spark's join (interval_join v0)
                for row in table.to_pylist():
                    if shown >= limit:
                        return
                    stdout.print(escape(f"{var.name}: {row!r}"), soft_wrap=True)
                    shown += 1
                continue
            for value in table.column("keys").to_pylist():
                held, _, _ = decode(value)
                for key, state in per_key(op.name, held):
                    if shown >= limit:
                        return
                    stdout.print(escape(f"{key!r}: {state!r}"), soft_wrap=True)
                    shown += 1
        return
    watermark = dt.datetime.fromtimestamp(m.watermark_ms / 1000, dt.UTC).isoformat()
    stdout.print(escape(
        f"savepoint format {m.format_version}, headrace {m.headrace_version}, Spark "
        f"{m.spark_version}, created {m.created_at}\nquery {m.query_id} batch {m.batch_id}, "
        f"{m.shuffle_partitions} shuffle partitions, watermark {m.watermark_ms} ({watermark})"),
        soft_wrap=True)
    print_listing(["operator", "name", "version", "keys", "buckets", "bytes", "partitions"],
                  [[str(o.operator_id), o.name or "(empty)", str(o.schema_version), str(o.keys),
                    str(sum(v.rows for v in o.variables)), str(o.bytes), str(o.partitions)]
                   for o in m.operators], names_only=False, empty="No stateful operators.")
    print_listing(["topic", "partition", "next offset"],
                  [[t, p, str(o)] for t, parts in sorted(sp.offsets().items())
                   for p, o in sorted(parts.items(), key=lambda kv: int(kv[0]))],
                  names_only=False, empty="No source offsets.")
    if m.sink:
        print_listing(["sink transactional id", "next batch"],
                      [[g, str(n)] for g, n in sorted(m.sink.items())], names_only=False,
                      empty="")
    replay = m.realtime_sink
    if replay is not None:
        stdout.print(escape(
            f"real-time sink: {replay.tasks} tasks, records of epoch {replay.epoch}, "
            f"{replay.id_count} ids carried; what it committed from these offsets on is "
            "not written again by a query started from this savepoint"), soft_wrap=True)
        print_listing(["output topic", "partition", "from offset"],
                      [[t, p, str(o)] for t, parts in sorted(replay.offsets.items())
                       for p, o in sorted(parts.items(), key=lambda kv: int(kv[0]))],
                      names_only=False, empty="")
