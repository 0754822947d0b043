"""Kafka's own perf tools against headrace, Apache Kafka and Tansu, side by side.

Runs the tools that ship with Apache Kafka (``org.apache.kafka.tools.ProducerPerformance``,
``ConsumerPerformance`` and ``EndToEndLatency`` from ``jvm/lib/kafka``) unmodified, with their
default client settings, against each broker in turn (``bench/brokers.py`` starts them):

- produce: ``ProducerPerformance --throughput -1`` for every cell of record size (100 B,
  1 KiB) x partitions (1, 6) x acks (1, all), each into a fresh topic;
- consume: ``ConsumerPerformance`` (a consumer group subscribing to the topic) reading the
  acks=all topic of each size x partitions cell back from the start; the figure is the
  tool's ``fetch.*`` rate, which leaves out the group join;
- latency: ``EndToEndLatency`` (one record at a time: send, wait for the ack, poll it back)
  on a one-partition topic, acks=all; the tool reports p50/p99/p99.9 in whole milliseconds
  and the mean with decimals.

Durability is each broker's normal mode: Apache Kafka writes to the page cache and leaves
flushing to the OS (``log.flush.interval.messages`` unset: no fsync per write); headrace
without ``--fsync`` does the same; Tansu keeps its log in memory (``memory://``). Every run
starts each broker afresh; ``--runs`` repeats the whole sweep and the tables show medians
with the spread (max - min) / median. ``--quick`` is a smoke-sized sweep (one size, small
counts) that checks the wiring, not the speed.

    python bench/kafka_perf.py [--runs 3] [--brokers headrace,kafka,tansu] [--quick] [--write-md]
"""

from __future__ import annotations

import contextlib
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import psutil  # type: ignore[import-untyped]

from brokers import (
    KAFKA_JVM_OPTS,
    BrokerSpec,
    add_brokers_option,
    create_topic,
    kafka_version,
    running,
)
from report import (
    arguments,
    fmt_float,
    fmt_int,
    fmt_ratio,
    publish,
    show_environment,
    table,
)

SPECS: tuple[BrokerSpec, ...] = (BrokerSpec("headrace"), BrokerSpec("kafka"), BrokerSpec("tansu"))
REFERENCE = "kafka"
# kafka-producer-perf-test.sh / kafka-consumer-perf-test.sh set -Xmx512M for the tools.
TOOL_JVM_OPTS: tuple[str, ...] = ("-Xmx512M", *KAFKA_JVM_OPTS[2:])
TOOL_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Sizes:
    records: dict[int, int]  # record size -> records per produce run
    partitions: tuple[int, ...]
    acks: tuple[str, ...]
    latency_records: int
    warmup_records: int  # 100 B records produced and consumed first, not measured


FULL = Sizes({100: 1_000_000, 1024: 300_000}, (1, 6), ("1", "all"), 5_000, 500_000)
QUICK = Sizes({100: 20_000}, (1,), ("all",), 200, 0)


@dataclass(frozen=True)
class Cell:
    test: str  # produce | consume
    size: int
    partitions: int
    acks: str  # "-" for consume


@dataclass
class Rates:
    records_per_s: list[float] = field(default_factory=list)
    mb_per_s: list[float] = field(default_factory=list)
    # Broker CPU (user + system, all its threads and child processes) per million records.
    cpu_s_per_m: list[float] = field(default_factory=list)


def broker_cpu_s(pid: int) -> float:
    """CPU seconds used so far by the broker process and its children."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        for proc in (root, *root.children(recursive=True)):
            with contextlib.suppress(psutil.NoSuchProcess):
                t = proc.cpu_times()
                total += t.user + t.system
    except psutil.NoSuchProcess:
        pass
    return total


@dataclass
class Latency:
    avg_ms: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    p999: list[float] = field(default_factory=list)


@dataclass
class Results:
    rates: dict[tuple[str, Cell], Rates] = field(default_factory=dict)
    latency: dict[str, Latency] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def tool(name: str, *args: str, timeout_s: float = TOOL_TIMEOUT_S) -> str:
    """Run one of Kafka's tools to completion; its stdout (raises with its output on failure)."""
    from headrace import jvm

    log_config = jvm.lib_dir().parent / "kafka" / "config" / "log4j2.yaml"
    cmd = [jvm.java_executable(), *TOOL_JVM_OPTS, f"-Dlog4j2.configurationFile={log_config}",
           "-cp", jvm.classpath("kafka"), f"org.apache.kafka.tools.{name}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited {proc.returncode}:\n{proc.stdout[-2000:]}"
                           f"{proc.stderr[-2000:]}")
    return proc.stdout


_PRODUCED = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency")


def parse_producer(out: str) -> tuple[int, float, float]:
    """ProducerPerformance's summary: (records, records/s, MB/s; MB = 2^20 bytes)."""
    found = _PRODUCED.findall(out)
    if not found:
        raise ValueError(f"no ProducerPerformance summary in:\n{out[-2000:]}")
    n, rps, mbps, _ = found[-1]
    return int(n), float(rps), float(mbps)


def parse_consumer(out: str) -> tuple[int, float, float]:
    """ConsumerPerformance's CSV line: (records, fetch records/s, fetch MB/s; MB = 2^20)."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    for i, line in enumerate(lines[:-1]):
        if line.startswith("start.time"):
            names = [c.strip() for c in line.split(",")]
            values = [c.strip() for c in lines[i + 1].split(",")]
            row = dict(zip(names, values, strict=False))
            return (int(row["data.consumed.in.nMsg"]), float(row["fetch.nMsg.sec"]),
                    float(row["fetch.MB.sec"]))
    raise ValueError(f"no ConsumerPerformance CSV in:\n{out[-2000:]}")


_AVG = re.compile(r"Avg latency: ([\d.]+) ms")
_PCT = re.compile(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99\.9th = ([\d.]+)")


def parse_latency(out: str) -> tuple[float, float, float, float]:
    """EndToEndLatency's summary: (avg, p50, p99, p99.9) in ms."""
    avg, pct = _AVG.search(out), _PCT.search(out)
    if avg is None or pct is None:
        raise ValueError(f"no EndToEndLatency summary in:\n{out[-2000:]}")
    return (float(avg.group(1)), float(pct.group(1)), float(pct.group(2)),
            float(pct.group(3)))


def produce(bootstrap: str, topic: str, records: int, size: int, acks: str) -> tuple[float, float]:
    out = tool("ProducerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
               "--num-records", str(records), "--record-size", str(size),
               "--throughput", "-1", "--command-property", f"acks={acks}")
    n, rps, mbps = parse_producer(out)
    if n != records:
        raise RuntimeError(f"ProducerPerformance sent {n} of {records} records")
    return rps, mbps


def consume(bootstrap: str, topic: str, records: int) -> tuple[float, float]:
    out = tool("ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
               "--num-records", str(records), "--group", f"perf-{topic}-{time.time_ns()}",
               "--timeout", "30000")
    n, rps, mbps = parse_consumer(out)
    if n < records:
        raise RuntimeError(f"ConsumerPerformance read {n} of {records} records")
    return rps, mbps


def end_to_end(bootstrap: str, topic: str, records: int) -> tuple[float, float, float, float]:
    out = tool("EndToEndLatency", bootstrap, topic, str(records), "all", "100")
    return parse_latency(out)


def _measure(spec: BrokerSpec, pid: int, results: Results, cell: Cell, records: int,
             run: Callable[[], tuple[float, float]], label: str,
             before: Callable[[], object] | None = None) -> None:
    """Run one cell's tool, record its rates and the broker's CPU per million records (or
    the error), and print a line."""
    try:
        if before is not None:
            before()
        cpu0 = broker_cpu_s(pid)
        rps, mbps = run()
        cpu = (broker_cpu_s(pid) - cpu0) / records * 1e6
    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        results.errors.append(f"{spec.name} {cell}: {e}")
        print(f"  {spec.name} {cell}: FAILED {e}", flush=True)
        return
    r = results.rates.setdefault((spec.kind, cell), Rates())
    r.records_per_s.append(rps)
    r.mb_per_s.append(mbps)
    r.cpu_s_per_m.append(cpu)
    print(f"  {spec.name:9} {label}: {rps:12,.0f} rec/s {mbps:8.1f} MB/s, "
          f"broker CPU {cpu:6.2f} s/M", flush=True)


def run_broker(spec: BrokerSpec, sizes: Sizes, results: Results) -> None:
    """One fresh broker: a warm-up (so that a JVM broker's JIT has compiled its hot paths),
    every produce cell, every consume cell, then the latency test."""
    with running(spec) as broker:
        bs = broker.bootstrap_servers
        if sizes.warmup_records:
            try:
                create_topic(bs, "perf-warmup", 6)
                produce(bs, "perf-warmup", sizes.warmup_records, 100, "1")
                consume(bs, "perf-warmup", sizes.warmup_records)
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                results.errors.append(f"{spec.name} warm-up: {e}")
                print(f"  {spec.name} warm-up: FAILED {e}", flush=True)
                return
        for size, records in sizes.records.items():
            for parts in sizes.partitions:
                for acks in sizes.acks:
                    topic = f"perf-{size}b-{parts}p-acks{acks}"
                    create = partial(create_topic, bs, topic, parts)
                    run = partial(produce, bs, topic, records, size, acks)
                    _measure(spec, broker.pid, results, Cell("produce", size, parts, acks),
                             records, run, f"produce {size:>5} B x{parts} acks={acks:3}",
                             before=create)
                topic = f"perf-{size}b-{parts}p-acks{sizes.acks[-1]}"
                _measure(spec, broker.pid, results, Cell("consume", size, parts, "-"), records,
                         partial(consume, bs, topic, records),
                         f"consume {size:>5} B x{parts}         ")
        topic = "perf-latency"
        try:
            create_topic(bs, topic, 1)
            avg, p50, p99, p999 = end_to_end(bs, topic, sizes.latency_records)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            results.errors.append(f"{spec.name} latency: {e}")
            print(f"  {spec.name} latency: FAILED {e}", flush=True)
            return
        lat = results.latency.setdefault(spec.kind, Latency())
        lat.avg_ms.append(avg)
        lat.p50.append(p50)
        lat.p99.append(p99)
        lat.p999.append(p999)
        print(f"  {spec.name:9} end-to-end: avg {avg:.3f} ms, p50 {p50:g}, p99 {p99:g}, "
              f"p99.9 {p999:g} ms", flush=True)


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _with_spread(xs: Sequence[float], digits: int | None = None) -> str:
    """Median of ``xs`` (``digits`` decimals, or an integer) and ± half the spread."""
    if not xs:
        return "-"
    m = statistics.median(xs)
    text = fmt_int(m) if digits is None else fmt_float(m, digits)
    if len(xs) > 1 and m > 0:
        text += f" ±{(max(xs) - min(xs)) / m * 50:.0f}%"
    return text


def render(results: Results, specs: Sequence[BrokerSpec], sizes: Sizes) -> str:
    kinds = [s.kind for s in specs]
    names = {s.kind: s.name for s in specs}
    others = [k for k in kinds if k != REFERENCE]
    out: list[str] = []
    for test in ("produce", "consume"):
        headers = ["record", "partitions", *(["acks"] if test == "produce" else [])]
        headers += [f"{names[k]} rec/s" for k in kinds] + [f"{names[k]} MB/s" for k in kinds]
        headers += [f"{names[k]} CPU s/M" for k in kinds]
        if REFERENCE in kinds:
            headers += [f"{names[k]}/Kafka" for k in others]
        rows: list[list[str]] = []
        for size in sizes.records:
            for parts in sizes.partitions:
                for acks in (sizes.acks if test == "produce" else ("-",)):
                    cell = Cell(test, size, parts, acks)
                    rates = {k: results.rates.get((k, cell), Rates()) for k in kinds}
                    row = [f"{size} B", str(parts), *([acks] if test == "produce" else [])]
                    row += [_with_spread(rates[k].records_per_s) for k in kinds]
                    row += [_with_spread(rates[k].mb_per_s, 1) for k in kinds]
                    row += [_with_spread(rates[k].cpu_s_per_m, 2) for k in kinds]
                    if REFERENCE in kinds:
                        ref = _median(rates[REFERENCE].records_per_s)
                        row += [fmt_ratio(_median(rates[k].records_per_s), ref) for k in others]
                    rows.append(row)
        what = "ProducerPerformance" if test == "produce" else "ConsumerPerformance"
        out.append(f"### {test.capitalize()} ({what})")
        out.append("")
        out.append(table(headers, rows))
        out.append("")
    headers = ["broker", "avg ms", "p50 ms", "p99 ms", "p99.9 ms", "p99 vs Kafka"]
    rows = []
    ref_lat = results.latency.get(REFERENCE)
    for k in kinds:
        lat = results.latency.get(k, Latency())
        rows.append([names[k], _with_spread(lat.avg_ms, 3),
                     _with_spread(lat.p50, 0), _with_spread(lat.p99, 0),
                     _with_spread(lat.p999, 0),
                     fmt_ratio(_median(lat.p99), _median(ref_lat.p99) if ref_lat else None)])
    out.append("### End-to-end latency (EndToEndLatency)")
    out.append("")
    out.append(table(headers, rows))
    return "\n".join(out)


def notes(sizes: Sizes, runs: int) -> list[str]:
    counts = ", ".join(f"{n:,} x {s} B" for s, n in sizes.records.items())
    return [
        f"tools: Apache Kafka {kafka_version()} (kafka-tools), run as `java {' '.join(TOOL_JVM_OPTS)}"
        " -cp jvm/lib/kafka/* org.apache.kafka.tools.<Tool>` with the tools' default client"
        " settings (Java producer 4.3: batch.size 16384, linger.ms 5, no compression;"
        " idempotence off for acks=1, on for acks=all)",
        f"Apache Kafka {kafka_version()} broker: single-node KRaft, `java "
        f"{' '.join(KAFKA_JVM_OPTS)}` (kafka-server-start.sh's options), Kafka's default "
        "durability: appends go to the page cache, flushed by the OS, no fsync per write",
        "headrace: `python -m headrace broker` (uvloop) without --fsync, i.e. the same "
        "durability as Kafka's default (page cache, no fsync per write); headrace --fsync is "
        "not compared here because Kafka is not run with per-write flushes",
        "Tansu: `--storage-engine memory://tansu/` (in memory, not durable)",
        f"produce: ProducerPerformance --throughput -1, {counts} per cell, each cell "
        "into its own fresh topic; MB = 2^20 bytes of record values, as the tools count",
        "consume: ConsumerPerformance (group subscribe, --fetch-size 1 MiB default) reading "
        "the acks=all topic of the cell back; rates are the tool's fetch.nMsg.sec and "
        "fetch.MB.sec, which exclude the group join",
        f"latency: EndToEndLatency <bootstrap> perf-latency {sizes.latency_records} all 100 "
        "(synchronous send, ack, then poll; one partition); the tool reports "
        "percentiles in whole milliseconds",
        f"each broker started fresh for each of {runs} run(s), then warmed up with "
        f"{sizes.warmup_records:,} x 100 B records produced and consumed (not measured), so that "
        "Kafka's JIT has compiled its hot paths; median over runs, ± is half "
        "the spread (max - min) / median; ratios are medians over medians",
        "CPU s/M: the broker's CPU seconds (user + system, all threads and child processes, "
        "from /proc) per million records while the tool ran, including the tool's start-up "
        "and the consumer's group join",
        "client tools and broker share the machine's 2 cores; the machine is shared with "
        "other engineers' test runs, so figures are noisy",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = arguments(__doc__, "kafka_perf")
    ap.add_argument("--runs", type=int, default=3, help="full sweeps; tables show medians")
    add_brokers_option(ap, SPECS, "headrace,kafka,tansu")
    ap.add_argument("--quick", action="store_true", help="smoke-sized sweep, one run")
    args = ap.parse_args(argv)
    specs: list[BrokerSpec] = args.brokers
    sizes = QUICK if args.quick else FULL
    runs = 1 if args.quick else args.runs
    env = show_environment([f"JVM: {java_version()}; Apache Kafka {kafka_version()}"])
    results = Results()
    for run in range(1, runs + 1):
        for spec in specs:
            print(f"run {run}/{runs}: {spec.name}", flush=True)
            try:
                run_broker(spec, sizes, results)
            except RuntimeError as e:
                results.errors.append(f"{spec.name}: {e}")
                print(f"  {spec.name}: FAILED {e}", flush=True)
    publish("kafka_perf", "Kafka's perf tools: headrace, Apache Kafka, Tansu", env,
            render(results, specs, sizes),
            [*notes(sizes, runs), *dict.fromkeys(f"FAILED {_summary(e)}" for e in results.errors)],
            args.write_md, args.md_file)
    return 1 if results.errors else 0


def _summary(error: str) -> str:
    """An error's first line plus the first exception line of a tool's output, if any."""
    lines = error.splitlines()
    cause = next((ln.strip() for ln in lines[1:] if "Exception" in ln or "Error" in ln), "")
    return f"{lines[0]} {cause}".strip() if lines else error


def java_version() -> str:
    from headrace import jvm

    out = subprocess.run([jvm.java_executable(), "-version"], capture_output=True, text=True)
    first = (out.stderr or out.stdout).splitlines()
    return first[0].strip() if first else "java ?"


if __name__ == "__main__":
    sys.exit(main())
