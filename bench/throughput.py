"""Produce and consume throughput of headrace and Tansu, with librdkafka (confluent-kafka).

Usage::

    .venv/bin/python bench/throughput.py                 # full run, every cell, every broker
    .venv/bin/python bench/throughput.py --quick         # smoke run (10x fewer records)
    .venv/bin/python bench/throughput.py --write-md      # also refresh BENCHMARKS.md
    .venv/bin/python bench/throughput.py --brokers tansu --sizes 100 --partitions 8

Cells are record size (100 B, 1024 B) x partitions (1, 8); each cell is run against every
broker (headrace, headrace --fsync, Tansu) before moving to the next cell, each on a freshly
started broker and a fresh topic, so the brokers of one cell are measured close together.

Producer: one librdkafka producer tuned for throughput (acks=all, linger.ms=5, batch.size
1 MB, large local queue, no compression, no idempotence), records spread round-robin over
the partitions by explicit partition number, timed from the first ``produce()`` until
``flush()`` returns (every record acknowledged). Consumer: a fresh consumer using manual
assignment (``assign()`` at OFFSET_BEGINNING on every partition; it never joins a group or
commits), timed from the first record received to the last. MB are 10^6 bytes of record
values; keys are empty, so wire bytes are a little higher.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass

from brokers import (
    ALL_SPECS,
    METRICS_SPEC,
    BrokerSpec,
    add_brokers_option,
    create_topic,
    running,
)
from clients import Phase, consume, cpu_seconds, produce
from report import (
    arguments,
    fmt_float,
    fmt_int,
    fmt_ratio,
    publish,
    show_environment,
    table,
)

DEFAULT_RECORDS = {100: 2_000_000, 1024: 1_000_000}
QUICK_DIVISOR = 10


@dataclass(frozen=True)
class Cell:
    size: int
    partitions: int
    records: int

    @property
    def label(self) -> str:
        return f"{self.size} B x {self.partitions}p"


@dataclass(frozen=True)
class Result:
    spec: BrokerSpec
    cell: Cell
    produce: Phase | None
    consume: Phase | None
    error: str | None = None


def run_cell(spec: BrokerSpec, cell: Cell) -> Result:
    try:
        with running(spec) as broker:
            topic = f"bench-{cell.size}b-{cell.partitions}p"
            create_topic(broker.bootstrap_servers, topic, cell.partitions)
            bs, cpu = broker.bootstrap_servers, cpu_seconds(broker.pid)
            p = produce(bs, topic, cell.records, cell.size, cell.partitions, broker_cpu=cpu)
            c = consume(bs, topic, cell.records, cell.partitions, broker_cpu=cpu)
            return Result(spec, cell, p, c)
    except Exception as e:  # one broken cell must not lose the others' figures
        traceback.print_exc()
        return Result(spec, cell, None, None, f"{type(e).__name__}: {e}")


def combine(results: list[Result]) -> Result:
    """Median over repeated runs of one (broker, cell); any failure marks the cell failed."""
    failed = [r for r in results if r.error is not None]
    if failed:
        return failed[0]

    def med(phases: list[Phase]) -> Phase:
        """The run with the median records/s (the upper middle one for an even count)."""
        return sorted(phases, key=lambda ph: ph.records_per_s)[len(phases) // 2]

    return Result(
        results[0].spec,
        results[0].cell,
        med([r.produce for r in results if r.produce is not None]),
        med([r.consume for r in results if r.consume is not None]),
    )


def render(results: list[Result]) -> str:
    tansu = {r.cell: r for r in results if r.spec.kind == "tansu" and r.error is None}
    rows: list[list[str]] = []
    for r in results:
        head = [r.spec.name, f"{r.cell.size} B", str(r.cell.partitions), fmt_int(r.cell.records)]
        if r.error is not None or r.produce is None or r.consume is None:
            rows.append([*head, "failed", "-", "-", "-", "-", "-"])
            continue
        t = tansu.get(r.cell) if r.spec.kind != "tansu" else None
        rows.append(
            [
                *head,
                fmt_int(r.produce.records_per_s),
                fmt_float(r.produce.mb_per_s),
                fmt_ratio(
                    r.produce.records_per_s, t.produce.records_per_s if t and t.produce else None
                ),
                fmt_int(r.consume.records_per_s),
                fmt_float(r.consume.mb_per_s),
                fmt_ratio(
                    r.consume.records_per_s, t.consume.records_per_s if t and t.consume else None
                ),
            ]
        )
    return table(
        [
            "broker",
            "record",
            "partitions",
            "records",
            "produce rec/s",
            "produce MB/s",
            "produce vs Tansu",
            "consume rec/s",
            "consume MB/s",
            "consume vs Tansu",
        ],
        rows,
    )


def notes(runs: int) -> list[str]:
    out = [
        "producer: acks=all, linger.ms=5, batch.size=1000000, no compression, no idempotence, "
        "round-robin over partitions; timed from first produce() until flush() returns",
        "consumer: fresh consumer, assign() at OFFSET_BEGINNING on all partitions, no group "
        "membership or commits, fetch.wait.max.ms=100, max.partition.fetch.bytes=1 MiB, "
        "fetch.queue.backoff.ms=10 (librdkafka's 1 s default idles a consumer that is fed "
        "faster than it drains); timed from the first batch received to the last, counting "
        "the records after the first batch",
        "each cell on a freshly started broker; headrace --fsync fsyncs before acknowledging; "
        "Tansu stores in memory (memory://tansu/)",
        'MB = 10^6 bytes of record values; "vs Tansu" = headrace records/s / Tansu records/s '
        "in the same cell",
        "client and broker share the machine's cores; the Python client itself tops out around "
        "1M records/s, so 100 B cells can be client-bound",
    ]
    if runs > 1:
        out.append(f"median of {runs} runs per cell")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, "throughput")
    add_brokers_option(ap, (*ALL_SPECS[:1], METRICS_SPEC, *ALL_SPECS[1:]))
    ap.add_argument("--sizes", default="100,1024", help="record value sizes in bytes")
    ap.add_argument("--partitions", default="1,8", help="partition counts")
    ap.add_argument(
        "--records",
        type=int,
        default=None,
        help="records per cell (default 2,000,000 for 100 B, 1,000,000 for 1 KiB)",
    )
    ap.add_argument("--runs", type=int, default=1, help="runs per cell; the median is reported")
    ap.add_argument("--quick", action="store_true", help="smoke run with 10x fewer records")
    args = ap.parse_args(argv)

    specs: list[BrokerSpec] = args.brokers
    cells: list[Cell] = []
    for size in (int(s) for s in args.sizes.split(",")):
        n = args.records or DEFAULT_RECORDS.get(size, max(1, 100_000_000 // size))
        if args.quick and args.records is None:
            n //= QUICK_DIVISOR
        cells.extend(Cell(size, int(p), n) for p in args.partitions.split(","))

    env = show_environment()
    results: list[Result] = []
    for cell in cells:
        for spec in specs:
            runs: list[Result] = []
            for i in range(args.runs):
                r = run_cell(spec, cell)
                runs.append(r)
                if r.error is not None:
                    print(f"[{cell.label}] {spec.name}: FAILED {r.error}", flush=True)
                    break
                assert r.produce is not None and r.consume is not None
                print(
                    f"[{cell.label}] {spec.name} run {i + 1}: "
                    f"produce {fmt_int(r.produce.records_per_s)} rec/s "
                    f"{fmt_float(r.produce.mb_per_s)} MB/s in {r.produce.seconds:.2f}s "
                    f"(produce() loop {r.produce.loop_s:.2f}s, "
                    f"broker CPU {r.produce.broker_cpu_s:.1f}s); "
                    f"consume {fmt_int(r.consume.records_per_s)} rec/s "
                    f"{fmt_float(r.consume.mb_per_s)} MB/s in {r.consume.seconds:.2f}s "
                    f"(broker CPU {r.consume.broker_cpu_s:.1f}s)",
                    flush=True,
                )
            results.append(combine(runs))

    failed = [r for r in results if r.error is not None]
    publish(
        "throughput",
        "Throughput",
        env,
        render(results),
        [*notes(args.runs), *(f"FAILED {r.spec.name} {r.cell.label}: {r.error}" for r in failed)],
        args.write_md,
        args.md_file,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
