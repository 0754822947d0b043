"""Produce-to-consume latency at a steady rate, headrace and Tansu side by side.

Usage::

    .venv/bin/python bench/latency.py                  # 10k records/s for 10 s per broker
    .venv/bin/python bench/latency.py --quick          # 3 s per broker
    .venv/bin/python bench/latency.py --write-md       # also refresh BENCHMARKS.md
    .venv/bin/python bench/latency.py --brokers headrace,tansu --rate 5000 --duration 20

For each broker: a fresh broker and a one-partition topic; a consumer in a separate process
(its own interpreter, so it does not share a GIL with the producer) with manual assignment and
a small ``fetch.wait.max.ms``; the producer in this process, paced at ``--rate`` records/s
(sending whatever is due, then sleeping until the next record is due). Each value carries
the CLOCK_MONOTONIC time at which ``produce()`` was called; latency is the consumer's clock
when ``consume()`` hands the record over minus that time (one host, one clock). A warm-up
phase (connections made, consumer fetching) precedes the measured phase and is discarded.
"""

from __future__ import annotations

import multiprocessing as mp
import struct
import sys
import time
import traceback
from array import array
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from brokers import ALL_SPECS, BrokerSpec, add_brokers_option, create_topic, running
from clients import DeliveryErrors
from report import (
    arguments,
    fmt_float,
    fmt_int,
    percentile,
    publish,
    show_environment,
    table,
)

TOPIC = "bench-latency"
HEADER = struct.Struct("<bq")  # kind, produce-time in ns (CLOCK_MONOTONIC)
WARMUP, MEASURED, STOP = 0, 1, 2
READY_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Settings:
    rate: int
    duration_s: float
    warmup_s: float
    size: int
    linger_ms: float
    fetch_wait_ms: int


@dataclass(frozen=True)
class Result:
    spec: BrokerSpec
    sent: int
    received: int
    achieved_rate: float
    latencies_ms: list[float]  # sorted
    error: str | None = None

    def pct(self, q: float) -> float:
        """Percentile ``q`` of the latencies, in ms."""
        return percentile(self.latencies_ms, q)


def consumer_main(
    bootstrap: str,
    fetch_wait_ms: int,
    polling: Event,
    first_seen: Event,
    progress: Synchronized[int],
    out: Connection,
    deadline_s: float,
) -> None:
    """Child process: read the topic, send back the measured latencies (ns) as bytes."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "headrace-bench-latency",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.min.bytes": 1,
            "fetch.wait.max.ms": fetch_wait_ms,
            "socket.nagle.disable": True,
            "log_level": 3,
        }
    )
    latencies = array("q")
    stopped = False
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        end = time.monotonic() + deadline_s
        unpack, now_ns, poll = HEADER.unpack_from, time.monotonic_ns, consumer.poll
        while not stopped and time.monotonic() < end:
            # poll(), not consume(n, timeout): the latter waits for n records or the timeout.
            m = poll(0.05)
            polling.set()
            if m is None:
                continue
            received_ns = now_ns()
            if m.error() is not None:
                raise RuntimeError(f"consume error: {m.error()}")
            kind, sent_ns = unpack(m.value() or b"")
            if kind == MEASURED:
                latencies.append(received_ns - sent_ns)
                progress.value += 1
            elif kind == WARMUP:
                first_seen.set()
            else:
                stopped = True
        out.send(("ok" if stopped else "timeout", latencies.tobytes()))
    except Exception as e:
        out.send((f"error: {type(e).__name__}: {e}", latencies.tobytes()))
    finally:
        consumer.close()
        out.close()


def _value(kind: int, size: int) -> bytes:
    return HEADER.pack(kind, time.monotonic_ns()) + b"\0" * max(0, size - HEADER.size)


def produce_paced(bootstrap: str, s: Settings, first_seen: Event) -> tuple[int, float]:
    """Warm up, then produce ``rate * duration`` measured records; returns (sent, rate)."""
    errors = DeliveryErrors()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": s.linger_ms,
            "compression.type": "none",
            "enable.idempotence": False,
            "socket.nagle.disable": True,
            "delivery.report.only.error": True,
            "on_delivery": errors,
            "log_level": 3,
        }
    )
    send, poll, now_ns = producer.produce, producer.poll, time.monotonic_ns
    interval_ns = 1e9 / s.rate

    def paced(kind: int, n: int | None, until_ns: int | None) -> tuple[int, int]:
        """Send ``kind`` records on schedule until ``n`` sent or ``until_ns`` passes."""
        start = now_ns()
        i = 0
        while (n is None or i < n) and (until_ns is None or now_ns() < until_ns):
            due = start + int(i * interval_ns)
            t = now_ns()
            if t < due:
                time.sleep((due - t) / 1e9)
                continue
            send(TOPIC, _value(kind, s.size), partition=0)
            i += 1
            poll(0)
        return i, now_ns() - start

    # Warm-up: until the consumer (already polling) has seen a record, then warmup_s more.
    ready_deadline = now_ns() + int(READY_TIMEOUT_S * 1e9)
    while not first_seen.is_set():
        if now_ns() > ready_deadline:
            raise RuntimeError("consumer saw no record within the start-up timeout")
        paced(WARMUP, None, now_ns() + 100_000_000)
    paced(WARMUP, None, now_ns() + int(s.warmup_s * 1e9))
    producer.flush(DRAIN_TIMEOUT_S)

    sent, elapsed_ns = paced(MEASURED, int(s.rate * s.duration_s), None)
    for _ in range(3):
        send(TOPIC, _value(STOP, s.size), partition=0)
    remaining = producer.flush(DRAIN_TIMEOUT_S)
    if remaining or errors:
        first = f", first: {errors[0]}" if errors else ""
        raise RuntimeError(f"{remaining} unacknowledged records, {len(errors)} errors{first}")
    return sent, sent / (elapsed_ns / 1e9)


def run_broker(spec: BrokerSpec, s: Settings) -> Result:
    ctx = mp.get_context("spawn")
    try:
        with running(spec) as broker:
            create_topic(broker.bootstrap_servers, TOPIC, 1)
            polling, first_seen = ctx.Event(), ctx.Event()
            progress = ctx.Value("q", 0, lock=False)
            recv_end, send_end = ctx.Pipe(duplex=False)
            limit = READY_TIMEOUT_S + s.warmup_s + s.duration_s + 2 * DRAIN_TIMEOUT_S
            child = ctx.Process(
                target=consumer_main,
                args=(
                    broker.bootstrap_servers,
                    s.fetch_wait_ms,
                    polling,
                    first_seen,
                    progress,
                    send_end,
                    limit,
                ),
                daemon=True,
            )
            child.start()
            send_end.close()
            try:
                deadline = time.monotonic() + READY_TIMEOUT_S
                while not polling.wait(0.1):
                    if not child.is_alive() or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"consumer process did not start polling (exit {child.exitcode})"
                        )
                sent, rate = produce_paced(broker.bootstrap_servers, s, first_seen)
                if not recv_end.poll(DRAIN_TIMEOUT_S):
                    raise RuntimeError(
                        f"consumer still short after {DRAIN_TIMEOUT_S:.0f}s: "
                        f"{progress.value:,} of {sent:,} measured records received"
                    )
                try:
                    status, raw = recv_end.recv()
                except EOFError as e:
                    child.join(5)
                    raise RuntimeError(f"consumer process died (exit {child.exitcode})") from e
                child.join(10)
            finally:
                if child.is_alive():
                    child.terminate()
                    child.join(5)
            lat = array("q")
            lat.frombytes(raw)
            if status != "ok":
                raise RuntimeError(f"consumer: {status} after {len(lat)} records")
            ms = sorted(x / 1e6 for x in lat)
            if not ms:
                raise RuntimeError("no measured record was consumed")
            return Result(spec, sent, len(ms), rate, ms)
    except Exception as e:  # one broker's failure must not lose the others' figures
        traceback.print_exc()
        return Result(spec, 0, 0, 0.0, [], f"{type(e).__name__}: {e}")


def render(results: list[Result]) -> str:
    rows: list[list[str]] = []
    for r in results:
        if r.error is not None:
            rows.append([r.spec.name, "failed", "-", "-", "-", "-", "-", "-", "-"])
            continue
        rows.append(
            [
                r.spec.name,
                fmt_int(r.received),
                fmt_int(r.achieved_rate),
                fmt_float(r.pct(50), 2),
                fmt_float(r.pct(90), 2),
                fmt_float(r.pct(99), 2),
                fmt_float(r.pct(99.9), 2),
                fmt_float(r.latencies_ms[-1], 2),
                fmt_int(r.sent - r.received),
            ]
        )
    return table(
        ["broker", "records", "rate/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "lost"],
        rows,
    )


def notes(s: Settings) -> list[str]:
    return [
        f"{s.rate:,} records/s of {s.size} B for {s.duration_s:g} s per broker after a "
        f"{s.warmup_s:g} s warm-up; one partition; fresh broker per row",
        f"producer: acks=all, linger.ms={s.linger_ms:g}, no compression, TCP_NODELAY; "
        f"consumer (separate process): assign() at OFFSET_BEGINNING, "
        f"fetch.wait.max.ms={s.fetch_wait_ms}, fetch.min.bytes=1",
        "latency = consumer's CLOCK_MONOTONIC when poll() returns the record minus the "
        "time stamp in the value, taken at produce(): it includes the producer's linger and "
        "the broker's fetch wake-up, not the produce acknowledgement",
        "percentiles are nearest-rank over every measured record; lost = sent - received",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, "latency")
    add_brokers_option(ap, ALL_SPECS)
    ap.add_argument("--rate", type=int, default=10_000, help="records per second")
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    ap.add_argument("--warmup", type=float, default=2.0, help="discarded seconds first")
    ap.add_argument("--size", type=int, default=100, help="record value size in bytes")
    ap.add_argument("--linger-ms", type=float, default=1.0, help="producer linger.ms")
    ap.add_argument("--fetch-wait-ms", type=int, default=5, help="consumer fetch.wait.max.ms")
    ap.add_argument("--quick", action="store_true", help="3 s measured, 1 s warm-up")
    args = ap.parse_args(argv)
    if args.size < HEADER.size:
        raise SystemExit(f"--size must be at least {HEADER.size}")
    s = Settings(
        rate=args.rate,
        duration_s=3.0 if args.quick else args.duration,
        warmup_s=1.0 if args.quick else args.warmup,
        size=args.size,
        linger_ms=args.linger_ms,
        fetch_wait_ms=args.fetch_wait_ms,
    )
    specs: list[BrokerSpec] = args.brokers
    env = show_environment()
    results: list[Result] = []
    for spec in specs:
        r = run_broker(spec, s)
        results.append(r)
        if r.error is not None:
            print(f"{spec.name}: FAILED {r.error}", flush=True)
        else:
            print(
                f"{spec.name}: {r.received:,} records at {r.achieved_rate:,.0f}/s, "
                f"p50 {r.pct(50):.2f} ms, p99 {r.pct(99):.2f} ms, max {r.latencies_ms[-1]:.2f} ms",
                flush=True,
            )
    failed = [r for r in results if r.error is not None]
    publish(
        "latency",
        "Produce-to-consume latency",
        env,
        render(results),
        [*notes(s), *(f"FAILED {r.spec.name}: {r.error}" for r in failed)],
        args.write_md,
        args.md_file,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
