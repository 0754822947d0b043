"""``headrace capacity``: buffer time for a planned disk and rate, or measured live."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from headrace.cli.terminal import BootstrapServers, ClientConfig, stdout
from headrace.ops.capacity import (
    BrokerLoad,
    CapacitySampler,
    ClusterSample,
    TierPlan,
    broker_load,
    buffer_seconds,
    format_bytes,
    format_duration,
    parse_duration,
    parse_rate,
    parse_size,
    tier_plan,
)
from headrace.ops.clients import DEFAULT_BOOTSTRAP_SERVERS
from headrace.ops.errors import InvalidInputError


def capacity(
    disk: Annotated[
        str | None, typer.Option(help="Disk space for the log, e.g. 2TB or 500GiB.")
    ] = None,
    rate: Annotated[
        str | None, typer.Option(help="Ingest rate at peak, e.g. 50MB/s or 2TB/day.")
    ] = None,
    replication: Annotated[
        int, typer.Option(min=1, help="Copies of every byte (the replication factor).")
    ] = 1,
    brokers: Annotated[
        int | None, typer.Option(min=1, help="Brokers sharing the load; --disk is then each "
                                 "broker's disk, and the load per broker is shown.")
    ] = None,
    min_insync_replicas: Annotated[
        int, typer.Option(min=1, help="With --brokers: min.insync.replicas (brokers that may "
                          "fail while acks=all writes go on: replication - this).")
    ] = 1,
    partitions: Annotated[
        int, typer.Option(min=0, help="With --brokers: partitions of the stream's topics.")
    ] = 0,
    consumer_groups: Annotated[
        int, typer.Option(min=0, help="With --brokers: consumer groups reading every byte.")
    ] = 1,
    local_retention: Annotated[
        str | None, typer.Option(help="Tiered storage: how long the brokers' disks keep the "
                                 "stream (local.retention.ms), e.g. 1d or 12h.")
    ] = None,
    retention: Annotated[
        str | None, typer.Option(help="Tiered storage: how long the whole log is kept "
                                 "(retention.ms), e.g. 365d, or 'forever'.")
    ] = None,
    live: Annotated[
        bool, typer.Option("--live", help="Measure the running cluster instead.")
    ] = False,
    sample: Annotated[
        str, typer.Option(help="With --live: how long to measure, e.g. 5s or 1min.")
    ] = "5s",
    topic: Annotated[
        list[str] | None,
        typer.Option("--topic", "-t", help="With --live: only these topics; repeatable."),
    ] = None,
    include_internal: Annotated[
        bool, typer.Option(help="With --live: also the internal topics (__consumer_offsets...).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """How long the log can buffer before data is lost (seed 004's arithmetic).

    With --disk and --rate: the time the disk holds the stream, each byte stored
    --replication times (6TB at 150MB/s: 11.1 hours). With --brokers, --disk is each
    broker's, and the load on each broker is shown: disk writes, network in and out,
    partition replicas, and how many brokers may fail while acks=all writes go on
    (--replication minus --min-insync-replicas). With --rate, --local-retention and
    --retention (tiered storage): the local tier (the brokers' disks: rate x replication x
    local retention; with --disk, whether it fits) and the remote tier (the object store:
    rate x retention, one copy) sized separately. With --live: the ingest rate of every
    topic over --sample, its retention window at that rate, the disk's usable bytes
    (DescribeLogDirs), and for each consumer group its lag and the time until the lag
    exceeds retention at the current produce and consume rates: (records retained - lag)
    / (produce rate - consume rate).
    """
    try:
        if live:
            if disk or rate:
                raise typer.BadParameter("--live measures the cluster: drop --disk and --rate")
            seconds = parse_duration(sample)
            if seconds <= 0:
                raise InvalidInputError("--sample must be longer than zero")
            result = CapacitySampler(bootstrap_servers).sample(seconds, topic, include_internal)
            _print_live(result, as_json)
            return
        if local_retention is not None or retention is not None:
            if rate is None or local_retention is None or retention is None:
                raise typer.BadParameter("tiered storage planning needs --rate, "
                                         "--local-retention and --retention")
            plan = tier_plan(parse_rate(rate), parse_duration(local_retention),
                             None if retention.strip().lower() in ("forever", "-1")
                             else parse_duration(retention), replication)
            disk_total = None
            if disk is not None:
                disk_total = parse_size(disk) * (brokers or 1)
            _print_tiers(plan, disk_total, as_json)
            return
        if disk is None or rate is None:
            raise typer.BadParameter("give --disk and --rate, or --live")
        disk_bytes, rate_bps = parse_size(disk), parse_rate(rate)
        load = None
        if brokers is not None:
            load = broker_load(rate_bps, brokers, replication, min_insync_replicas, partitions,
                               consumer_groups)
            disk_bytes *= brokers  # --disk is each broker's
        seconds = buffer_seconds(disk_bytes, rate_bps, replication)
    except InvalidInputError as e:
        raise typer.BadParameter(str(e)) from e
    if as_json:
        stdout.print_json(json.dumps({"disk_bytes": disk_bytes, "rate_bytes_per_s": rate_bps,
                                      "replication": replication, "buffer_seconds": seconds,
                                      **({"per_broker": asdict(load)} if load else {})}))
        return
    written = rate_bps * replication
    stdout.print(f"Disk {format_bytes(disk_bytes)}; ingest {format_bytes(rate_bps)}/s"
                 + (f" x replication {replication} = {format_bytes(written)}/s written"
                    if replication > 1 else ""))
    stdout.print(f"The log can buffer [bold]{format_duration(seconds)}[/bold] "
                 f"({seconds:,.0f} s) of data at this rate.")
    stdout.print(f"Keep retention.ms at most {seconds * 1000:,.0f} so the disk does not fill "
                 "at this rate; a consumer that falls further behind than that loses data.")
    if load is not None:
        _print_load(load, partitions > 0)


def _print_tiers(plan: TierPlan, disk_bytes: float | None, as_json: bool) -> None:
    fits = None if disk_bytes is None else disk_bytes >= plan.local_bytes
    if as_json:
        stdout.print_json(json.dumps({**asdict(plan), "disk_bytes": disk_bytes,
                                      "local_fits": fits}))
        return
    stdout.print(f"Ingest {format_bytes(plan.rate_bytes_per_s)}/s; local retention "
                 f"{format_duration(plan.local_retention_s)}, retention "
                 + ("forever" if plan.retention_s is None
                    else format_duration(plan.retention_s)) + ".")
    stdout.print(f"Local tier (the brokers' disks, x{plan.replication}): "
                 f"[bold]{format_bytes(plan.local_bytes)}[/bold].")
    if plan.remote_bytes is None:
        stdout.print(f"Remote tier (the object store, one copy): grows by "
                     f"[bold]{format_bytes(plan.remote_bytes_per_day)}[/bold] a day, forever.")
    else:
        stdout.print(f"Remote tier (the object store, one copy): "
                     f"[bold]{format_bytes(plan.remote_bytes)}[/bold].")
    if disk_bytes is not None:
        held = buffer_seconds(disk_bytes, plan.rate_bytes_per_s, plan.replication)
        verdict = "fits" if fits else "does NOT fit"
        stdout.print(f"Disk {format_bytes(disk_bytes)}: the local tier {verdict}; the disk "
                     f"holds {format_duration(held)} (local.retention.ms at most "
                     f"{held * 1000:,.0f}).")


def _print_load(load: BrokerLoad, with_partitions: bool) -> None:
    stdout.print(f"Each of {load.brokers} brokers (disk {format_bytes(load.disk_write_bytes_per_s)}"
                 f"/s written, network in {format_bytes(load.network_in_bytes_per_s)}/s, out "
                 f"{format_bytes(load.network_out_bytes_per_s)}/s"
                 + (f", {load.partition_replicas:,.1f} partition replicas" if with_partitions
                    else "") + ").")
    stdout.print(f"With min.insync.replicas={load.min_insync_replicas}, acks=all writes go on "
                 f"with up to {load.tolerated_failures} of them down.")


def _print_live(result: ClusterSample, as_json: bool) -> None:
    if as_json:
        stdout.print_json(json.dumps(asdict(result)))
        return
    stdout.print(f"Sampled for {result.seconds:.1f} s.")
    tiered = any(t.remote_bytes is not None for t in result.topics)
    topics = Table("Topic", "Partitions", "Records/s", "Bytes/s", "Size", "cleanup.policy",
                   "Retention window", *(("Remote size",) if tiered else ()))
    for t in result.topics:
        window = format_duration(t.window_s) if t.window_s is not None else (
            "unlimited" if "delete" in t.cleanup_policy else "compacted: latest per key")
        topics.add_row(escape(t.topic), str(t.partitions), f"{t.records_per_s:,.1f}",
                       format_bytes(t.bytes_per_s) if t.bytes_per_s is not None else "-",
                       format_bytes(t.size_bytes) if t.size_bytes is not None else "-",
                       t.cleanup_policy, window,
                       *((format_bytes(t.remote_bytes) if t.remote_bytes is not None
                          else "-",) if tiered else ()))
    stdout.print(topics)
    if result.usable_bytes is not None and result.total_bytes:
        total_rate = result.bytes_per_s
        full = (format_duration(result.usable_bytes / total_rate) if total_rate > 0
                else "never at this rate")
        stdout.print(f"Disk: {format_bytes(result.usable_bytes)} usable of "
                     f"{format_bytes(result.total_bytes)}; ingest {format_bytes(total_rate)}/s "
                     f"fills it in {full}.")
    else:
        stdout.print("Disk: the cluster does not report its log directories (DescribeLogDirs).")
    if not result.groups:
        stdout.print("No consumer group has committed offsets on these topics.")
        return
    groups = Table("Group", "Worst partition", "Lag", "Produce/s", "Consume/s",
                   "Lag exceeds retention in")
    for g in result.groups:
        when = ("already: below the log start" if g.below_log_start
                else format_duration(g.falls_off_s) if g.falls_off_s != 0 else "now")
        if g.falls_off_s is None and not g.below_log_start:
            when = "never (keeping up, or unlimited retention)"
        groups.add_row(escape(g.group_id), escape(f"{g.topic}-{g.partition}"), f"{g.lag:,}",
                       f"{g.produce_rate:,.1f}", f"{g.consume_rate:,.1f}", when)
    stdout.print(groups)
