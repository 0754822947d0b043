"""Log cleaner: compaction throughput, and its effect on concurrent produce latency.

Usage::

    .venv/bin/python bench/cleaner.py               # both parts
    .venv/bin/python bench/cleaner.py --quick       # smaller logs, shorter run
    .venv/bin/python bench/cleaner.py --write-md    # also refresh BENCHMARKS.md

1. Throughput: a partition log (storage level, in this process, no broker) filled with
   keyed records, then one cleaning pass over all of it (``storage.cleaner``, driven to
   completion synchronously, the worker's part inline: fsyncs included, no IPC, no event
   loop to share). MB/s is input bytes (every segment read) per second of the pass.
2. Produce latency with the cleaner at work: a headrace broker, a compacted topic
   pre-filled with many keys (so each pass rewrites a large clean part), then a paced
   producer (acks=1) for ``--duration`` seconds, with the cleaner enabled (backoff 100 ms,
   min.cleanable.dirty.ratio 0.01: it runs nearly all the time) and, on a fresh broker,
   disabled; ``--repeat`` alternating pairs. Latency is librdkafka's per-message
   produce() to acknowledgement time.
"""

from __future__ import annotations

import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer
from kafka.record.default_records import DefaultRecordBatchBuilder

from brokers import BrokerSpec, create_topic, running
from headrace.protocol.records import validate_batches
from headrace.storage.cleaner import (
    CleanerConfig,
    clean,
    cleanable_range,
    run_to_completion,
)
from headrace.storage.config import LogConfig
from headrace.storage.log import PartitionLog
from report import (
    arguments,
    fmt_float,
    fmt_int,
    percentile,
    publish,
    show_environment,
    table,
)

TOPIC = "bench-cleaner"
CODECS = {"none": 0, "zstd": 4}


@dataclass(frozen=True)
class Workload:
    records: int
    keys: int
    value_size: int
    codec: str

    @property
    def name(self) -> str:
        return (f"{self.records:,} x {self.value_size} B over {self.keys:,} keys, "
                f"{self.codec}")


def throughput(w: Workload) -> list[str]:
    """Fill a log, clean it once; one table row."""
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as d:
        log = PartitionLog(Path(d) / "t-0", LogConfig(
            cleanup_policy="compact", segment_bytes=64 * 1024 * 1024, retention_ms=-1,
            min_cleanable_dirty_ratio=0.0), recover_fully=False)
        per_batch = 100
        for start in range(0, w.records, per_batch):
            b = DefaultRecordBatchBuilder(magic=2, compression_type=CODECS[w.codec],
                                          is_transactional=False, producer_id=-1,
                                          producer_epoch=-1, base_sequence=-1,
                                          batch_size=1 << 24)
            for i in range(per_batch):
                value = (b"%012d" % (start + i)) + rng.randbytes(w.value_size // 2) + bytes(
                    w.value_size - 12 - w.value_size // 2)
                b.append(i, 1_700_000_000_000, b"key-%09d" % rng.randrange(w.keys), value, [])
            data = bytearray(b.build())
            log.append(data, validate_batches(data))
        log.roll()
        rng_ = cleanable_range(log, 10**13)
        assert rng_ is not None
        stats = run_to_completion(clean(rng_, 10**13, CleanerConfig()))
        log.close()
    return [w.name, fmt_float(stats.bytes_read / 1e6), fmt_float(stats.bytes_written / 1e6),
            f"{stats.records_read:,} -> {stats.records_kept:,}", fmt_float(stats.duration_s, 2),
            fmt_float(stats.mb_per_s), fmt_int(stats.records_read / stats.duration_s)]


@dataclass
class LatencyRun:
    name: str
    latencies_ms: list[float]
    passes: int
    pass_mb: float
    pass_s: float
    rate: float

    def pct(self, q: float) -> float:
        return percentile(self.latencies_ms, q)


_PASS = re.compile(r"cleaned \S+ .*?: (\d+) -> \d+ bytes.*? ([0-9.]+) s, ([0-9.]+) MB/s")


def latency_run(cleaner: bool, keys: int, prefill: int, rate: int, duration: float) -> LatencyRun:
    args = ("--log-cleaner-backoff-ms", "100") if cleaner else ("--no-log-cleaner",)
    spec = BrokerSpec("headrace", extra_args=args)
    with running(spec) as broker:
        create_topic(broker.bootstrap_servers, TOPIC, 1, configs={
            "cleanup.policy": "compact", "segment.bytes": str(1024 * 1024),
            "min.cleanable.dirty.ratio": "0.01"})
        rng = random.Random(3)
        fill = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20,
                         "batch.num.messages": 2000, "log_level": 3})
        for i in range(prefill):
            while True:
                try:
                    fill.produce(TOPIC, key=b"key-%09d" % (i % keys), value=b"%096d" % i,
                                 partition=0)
                    break
                except BufferError:
                    fill.poll(0.01)
            fill.poll(0)
        assert fill.flush(60) == 0
        time.sleep(3)  # the first passes over the pre-filled log
        latencies: list[float] = []
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(err)
            else:
                latencies.append((msg.latency() or 0.0) * 1000)

        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": 1,
                             "linger.ms": 1, "socket.nagle.disable": True,
                             "on_delivery": on_delivery, "log_level": 3})
        log_mark = broker.log_path.stat().st_size
        interval = 1.0 / rate
        start = time.monotonic()
        i = 0
        while (now := time.monotonic()) - start < duration:
            due = start + i * interval
            if now < due:
                time.sleep(due - now)
                continue
            producer.produce(TOPIC, key=b"key-%09d" % rng.randrange(keys), value=b"%096d" % i,
                             partition=0)
            producer.poll(0)
            i += 1
        elapsed = time.monotonic() - start
        assert producer.flush(30) == 0 and not errors, errors[:3]
        with open(broker.log_path, "rb") as f:
            f.seek(log_mark)
            passes = [m for m in _PASS.finditer(f.read().decode(errors="replace"))]
    return LatencyRun("cleaner running" if cleaner else "cleaner disabled", sorted(latencies),
                      len(passes), sum(int(m.group(1)) for m in passes) / 1e6,
                      sum(float(m.group(2)) for m in passes), i / elapsed)


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, "cleaner")
    ap.add_argument("--quick", action="store_true", help="smaller logs, 5 s runs")
    ap.add_argument("--rate", type=int, default=5000, help="paced produce rate, records/s")
    ap.add_argument("--duration", type=float, default=15.0, help="measured seconds per run")
    ap.add_argument("--repeat", type=int, default=2,
                    help="latency runs per setting, alternating (shows the host's noise)")
    args = ap.parse_args(argv)
    env = show_environment()
    scale = 5 if args.quick else 1
    workloads = [Workload(500_000 // scale, 10_000, 100, "none"),
                 Workload(500_000 // scale, 10_000, 100, "zstd"),
                 Workload(100_000 // scale, 1_000, 1000, "none"),
                 Workload(500_000 // scale, 500_000 // scale, 100, "none")]
    rows = []
    for w in workloads:
        rows.append(throughput(w))
        print(" | ".join(rows[-1]), flush=True)
    duration = 5.0 if args.quick else args.duration
    keys, prefill = (50_000, 100_000) if args.quick else (200_000, 400_000)
    runs = []
    for n in range(1, args.repeat + 1):
        for enabled in (False, True):
            run = latency_run(enabled, keys, prefill, args.rate, duration)
            if args.repeat > 1:
                run.name += f" ({n})"
            runs.append(run)
    lat_rows = []
    for r in runs:
        print(f"{r.name}: p50 {r.pct(50):.2f} ms, p99 {r.pct(99):.2f} ms, "
              f"{r.passes} passes", flush=True)
        lat_rows.append([r.name, fmt_int(len(r.latencies_ms)), fmt_int(r.rate),
                         fmt_float(r.pct(50), 2), fmt_float(r.pct(99), 2),
                         fmt_float(r.pct(99.9), 2), fmt_float(r.latencies_ms[-1], 2),
                         str(r.passes), fmt_float(r.pass_mb),
                         fmt_float(r.pass_mb / r.pass_s) if r.pass_s else "-"])
    body = "\n\n".join([
        "Cleaning pass throughput (storage level, one pass over the whole log):",
        table(["workload", "in MB", "out MB", "records", "seconds", "MB/s", "records/s"], rows),
        f"Produce latency at {args.rate:,} records/s with the cleaner at work "
        f"({keys:,} keys pre-filled with {prefill:,} records):",
        table(["broker", "records", "rate/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms",
               "passes", "cleaned MB", "pass MB/s"], lat_rows),
    ])
    notes = [
        "throughput: values half random (incompressible), half zeros; 100 records per "
        "batch; segments of 64 MiB; the pass reads every segment, builds the key map over "
        "the dirty part (all of it here), rewrites each segment and swaps it in (fsyncs "
        "included)",
        "latency: one partition, segment.bytes 1 MiB, min.cleanable.dirty.ratio 0.01, "
        "log.cleaner.backoff.ms 100; producer acks=1, linger.ms=1; latency = "
        "librdkafka's Message.latency() (produce() to acknowledgement)",
        "in the broker, a pass reads and writes files on the event loop in small steps and "
        "sends chunks of 256 KiB of batches to the cleaner's worker process (niced by 10) "
        "for the CPU work; fsyncs run on a worker thread. This workload (dirty ratio 0.01, "
        "200k keys) keeps the cleaner busy most of the time; the host was shared with "
        "another workload (see the load average), which is where the p99 of both settings "
        "varies from run to run",
        "pass MB/s is the in-broker rate (file work on the loop, CPU work in the worker "
        "process, the chunks piped between them), from the broker's log; cleaned MB counts "
        "every segment each pass read",
    ]
    publish("cleaner", "Log cleaner", env, body, notes, args.write_md, args.md_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
