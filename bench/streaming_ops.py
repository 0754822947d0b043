"""Event-time operators of ``headrace.streaming``: events/s, state size, side-output cost.

Usage::

    .venv/bin/python bench/streaming_ops.py                      # default sizes
    .venv/bin/python bench/streaming_ops.py --events 50000 --keys 25000 --operators tumbling
    .venv/bin/python bench/streaming_ops.py --write-md           # also refresh BENCHMARKS.md

One embedded headrace broker, one local[2] SparkSession (RocksDB state store, 2 shuffle
partitions). Input topics (2 partitions, JSON values as ``read_events`` expects, record key
= the event key) are produced once with confluent-kafka, then every query reads them from
the earliest offset with ``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger`` = ``--batch``
(per source), on a fresh checkpoint, into the ``noop`` sink (every row is computed, then
dropped).

1. Operators (``--operators``; ``source`` is the baseline: ``read_events`` straight into
   the sink, no operator), all over ``--events`` events spread uniformly over
   ``--keys`` keys, event time advancing ``--rate`` events per second of event time with up
   to 2 s of disorder (never late: the watermark delay is 10 s):

   - ``tumbling`` / ``hopping`` / ``session`` / ``sliding``: ``windowed`` (count + sum) with
     tumbling 1 min, hopping 1 min every 20 s, session gap 30 s, per-event sliding 1 min
     windows, watermark 10 s, no allowed lateness, ``emit="final"``;
   - ``latest_join``: the events with a changelog of one row per key (``--keys`` rows, also
     spread over the event time);
   - ``temporal_join``: the same, each event joined with the version valid at its time
     (watermark 10 s);
   - ``table_join``: the events as a changelog of orders (primary key = the event key, so
     a key seen again is an update) joined with the table as products: an order's product
     is a hash of its key and amount over the ``--keys`` products, so nearly every update
     moves the order to another product;
   - ``interval_join``: the toolkit's stream-stream join (transformWithState since
     savepoints; Spark's native join before), events with one payment per second event on
     the same key 0-60 s later; watermarks 10 s;
   - ``detector``: the fraud pipeline's per-card detector (its four rules, default
     thresholds) over the events as transactions: card = user = the event key, one city,
     a fixed profile (watermark 10 s).

   Events/s = input rows (both sides for joins) / the sum of the micro-batches'
   ``triggerExecution`` durations (including the no-data batches that fire timers). State:
   the largest ``numRowsTotal`` over the micro-batches, and at the end ``numRowsTotal``,
   ``memoryUsedBytes`` and the RocksDB ``rocksdbSstFileSize`` custom metric (summed over the
   stateful operators).
2. Late-data side output: a tumbling 1 min count per key (watermark 10 s) over
   ``--late-events`` events of which ~1 % are 5 minutes behind (late from the second
   micro-batch on): Spark's native ``groupBy(window).count()`` (append; drops late rows),
   ``windowed`` with only ``kind = 'result'`` rows reaching the sink ("without"), and
   ``windowed`` with results and late rows reaching the sink ("with"), ``--repeats`` times,
   alternating. Reported: the median micro-batch duration of the data batches and the
   with / without ratio (goal: <= 1.15).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients import spark_session
from report import arguments, fmt_float, fmt_int, publish, show_environment, table

OPERATORS = ("source", "tumbling", "hopping", "session", "sliding", "latest_join",
             "temporal_join", "table_join", "interval_join", "detector")
WINDOW_OPERATORS = OPERATORS[1:5]
T0 = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000  # an hour boundary, epoch ms
DISORDER_MS = 2_000
LATE_BEHIND_MS = 5 * 60_000
LATE_FRACTION = 0.01
PARTITIONS = 2
LATE_BATCH = 50_000
QUERY_TIMEOUT_S = 1_800.0
EVENT_SCHEMA = "k string, ts long, amount double"
TABLE_SCHEMA = "k string, ts long, price double"
PAYMENT_SCHEMA = "k string, ts long, paid double"


# -- input data --------------------------------------------------------------------------

def create_topics(bs: str, names: Iterable[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    futures = admin.create_topics([NewTopic(n, num_partitions=PARTITIONS) for n in names])
    for f in futures.values():
        f.result(30)


def produce(bs: str, topic: str, rows: Iterable[tuple[str, dict[str, Any]]]) -> int:
    """Produce ``(key, value dict)`` rows as JSON; returns how many. Fails on any delivery
    error."""
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.num.messages": 10000,
                        "queue.buffering.max.messages": 500_000, "compression.type": "lz4",
                        "log_level": 3})
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, _: Any) -> None:
        if err is not None:
            errors.append(err)

    n = 0
    for key, value in rows:
        while True:
            try:
                producer.produce(topic, json.dumps(value).encode(), key.encode(),
                                 on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        n += 1
    if producer.flush(120) != 0 or errors:
        raise RuntimeError(f"{topic}: {len(errors)} delivery errors ({errors[:1]}) or unflushed")
    return n


def event_times(n: int, rate: int, seed: int) -> Iterator[int]:
    """``n`` event times advancing ``rate`` per second from T0, each up to DISORDER_MS
    early (out of order, never behind the 10 s watermark)."""
    rng = random.Random(seed)
    for i in range(n):
        yield T0 + i * 1000 // rate - rng.randrange(DISORDER_MS)


def events(n: int, keys: int, rate: int, seed: int = 1,
           late_fraction: float = 0.0) -> Iterator[tuple[str, dict[str, Any]]]:
    rng = random.Random(seed)
    for t in event_times(n, rate, seed + 100):
        k = f"k{rng.randrange(keys)}"
        if late_fraction and rng.random() < late_fraction:
            t -= LATE_BEHIND_MS
        yield k, {"k": k, "ts": t, "amount": rng.randrange(1, 10_000) / 100}


def table_rows(keys: int, events_n: int, rate: int,
               seed: int = 2) -> Iterator[tuple[str, dict[str, Any]]]:
    """One version per key, in random key order, over the events' event-time span."""
    rng = random.Random(seed)
    order = list(range(keys))
    rng.shuffle(order)
    span = events_n * 1000 // rate
    for i, k in enumerate(order):
        yield f"k{k}", {"k": f"k{k}", "ts": T0 + i * span // keys - 60_000,
                        "price": rng.randrange(100, 100_000) / 100}


def payments(n: int, keys: int, rate: int, seed: int = 1) -> Iterator[tuple[str, dict[str, Any]]]:
    """For every second event (same keys as ``events(n, keys, rate, seed)``), a payment on
    its key 0-60 s after it."""
    rng = random.Random(seed + 7)
    for i, (k, e) in enumerate(events(n, keys, rate, seed)):
        if i % 2 == 0:
            yield k, {"k": k, "ts": e["ts"] + rng.randrange(60_000), "paid": e["amount"]}


# -- Spark --------------------------------------------------------------------------------

def streaming_session() -> Any:
    """The benchmarks' local session, with the toolkit's settings (RocksDB state store, UTC)
    and every micro-batch's progress kept."""
    import headrace.streaming

    spark = spark_session("bench-streaming-ops",
                          {"spark.driver.memory": "3g",
                           "spark.sql.streaming.numRecentProgressUpdates": "1000"},
                          kafka_connector=False)
    headrace.streaming.configure(spark)
    return spark


@dataclass
class Sources:
    spark: Any
    bs: str
    batch: int

    def read(self, topic: str, schema: str, *columns: str) -> Any:
        from headrace.spark import read_events

        df = read_events(self.spark, topic, schema, event_time="ts",
                         dead_letter_topic=topic + "-dlq", kafka_bootstrap_servers=self.bs,
                         startingOffsets="earliest", maxOffsetsPerTrigger=str(self.batch))
        return df.select(*columns)


def build(op: str, src: Sources, topics: dict[str, str]) -> Any:
    from pyspark.sql import functions as F

    from headrace.streaming import count, hopping, session, sliding, sum_of, tumbling, windowed
    from headrace.streaming.joins import interval_join, latest_join, table_join, temporal_join

    ev = src.read(topics["events"], EVENT_SCHEMA, "k", "amount", "event_time")
    if op == "source":
        return ev
    if op in WINDOW_OPERATORS:
        window = {"tumbling": tumbling("1 minute"), "hopping": hopping("1 minute", "20 seconds"),
                  "session": session("30 seconds"), "sliding": sliding("1 minute")}[op]
        return windowed(ev, keys=["k"], event_time="event_time", window=window,
                        aggs=[count(), sum_of("amount")], watermark="10 seconds")
    if op == "latest_join":
        tb = src.read(topics["table"], TABLE_SCHEMA, "k", "price")
        return latest_join(ev, tb, on=["k"])
    if op == "temporal_join":
        tb = src.read(topics["table"], TABLE_SCHEMA, "k", "price",
                      F.col("event_time").alias("valid_at"))
        return temporal_join(ev, tb, on=["k"], event_time="event_time", valid_from="valid_at",
                             watermark="10 seconds")
    if op == "table_join":
        keys = int(topics["keys"])
        product = F.pmod(F.xxhash64("k", "amount"), F.lit(keys)).cast("string")
        orders = ev.select("k", "amount", F.concat(F.lit("k"), product).alias("p"))
        products = src.read(topics["table"], TABLE_SCHEMA, F.col("k").alias("p"), "price")
        return table_join(orders, products, on=["p"], left_key="k")
    if op == "interval_join":
        pay = src.read(topics["payments"], PAYMENT_SCHEMA, "k", "paid",
                       F.col("event_time").alias("paid_at"))
        return interval_join(ev, pay, on=["k"], left_time="event_time", right_time="paid_at",
                             lower=0, upper="1 minute", left_watermark="10 seconds",
                             right_watermark="10 seconds")
    if op == "detector":
        from headrace.pipelines.fraud.pipeline import detect
        from headrace.pipelines.fraud.rules import Thresholds

        txns = src.read(topics["events"], EVENT_SCHEMA, "k", "amount", "event_time",
                        "kafka_partition", "kafka_offset")
        return detect(txns.select(
            F.col("k").alias("card_id"),
            F.concat_ws("-", "kafka_partition", "kafka_offset").alias("txn_id"),
            F.col("k").alias("user_id"), "amount", F.lit(48.8566).alias("lat"),
            F.lit(2.3522).alias("lon"), F.lit("Paris").alias("city"), "event_time",
            F.lit(50.0).alias("avg_amount"), F.lit(10.0).alias("std_amount")),
            Thresholds(), "10 seconds", "0 seconds")
    raise ValueError(op)


def build_native(op: str, src: Sources, topics: dict[str, str]) -> Any | None:
    """Spark's own operator computing what ``op`` computes (without allowed lateness or a
    late side output), or None where Spark has none (per-event sliding windows, the
    stream-table joins; the interval join is Spark's own already)."""
    from pyspark.sql import functions as F

    windows = {"tumbling": lambda: F.window("event_time", "1 minute"),
               "hopping": lambda: F.window("event_time", "1 minute", "20 seconds"),
               "session": lambda: F.session_window("event_time", "30 seconds")}
    if op not in windows:
        return None
    ev = src.read(topics["events"], EVENT_SCHEMA, "k", "amount", "event_time")
    return (ev.withWatermark("event_time", "10 seconds").groupBy(windows[op](), "k")
            .agg(F.count(F.lit(1)).alias("count"), F.sum("amount").alias("sum_amount")))


# -- one query ----------------------------------------------------------------------------

@dataclass
class Run:
    name: str
    wall_s: float = 0.0
    progress: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def input_rows(self) -> int:
        return sum(p["numInputRows"] for p in self.progress)

    @property
    def output_rows(self) -> int:
        return sum(max(p.get("sink", {}).get("numOutputRows", 0), 0) for p in self.progress)

    @property
    def batch_ms(self) -> int:
        return sum(p["durationMs"].get("triggerExecution", 0) for p in self.progress)

    @property
    def data_batch_ms(self) -> list[int]:
        return [p["durationMs"].get("triggerExecution", 0) for p in self.progress
                if p["numInputRows"] > 0]

    @property
    def rate(self) -> float:
        return self.input_rows / (self.batch_ms / 1000) if self.batch_ms else 0.0

    def state(self, p: dict[str, Any], metric: str) -> int:
        total = 0
        for s in p.get("stateOperators", []):
            v = s.get(metric, s.get("customMetrics", {}).get(metric, 0))
            total += max(int(v or 0), 0)
        return total

    @property
    def peak_rows(self) -> int:
        return max((self.state(p, "numRowsTotal") for p in self.progress), default=0)

    def final(self, metric: str) -> int:
        return self.state(self.progress[-1], metric) if self.progress else 0


def run_query(name: str, df: Any, work: Path, sink: Callable[[Any], Any] | None = None) -> Run:
    """Run ``df`` to the end of its input (availableNow) into the noop sink (or ``sink``,
    given the DataStreamWriter)."""
    run = Run(name)
    try:
        writer = df.writeStream.queryName(name.replace(" ", "_")) \
            .option("checkpointLocation", str(work / f"cp-{name.replace(' ', '_')}-"
                                                     f"{time.monotonic_ns()}"))
        writer = sink(writer) if sink else writer.format("noop")
        start = time.perf_counter()
        q = writer.trigger(availableNow=True).start()
        if not q.awaitTermination(QUERY_TIMEOUT_S):
            q.stop()
            raise RuntimeError(f"not done in {QUERY_TIMEOUT_S:.0f} s")
        run.wall_s = time.perf_counter() - start
        run.progress = [json.loads(p.json) if hasattr(p, "json") else p
                        for p in q.recentProgress]
        if q.exception() is not None:
            raise RuntimeError(str(q.exception())[:500])
    except Exception as e:  # one failing query must not lose the others' figures
        traceback.print_exc()
        run.error = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    batches = len(run.data_batch_ms)
    print(f"[{name}] {run.input_rows:,} rows in {batches} data batches "
          f"({len(run.progress)} in all), batches {run.batch_ms / 1000:.1f} s, wall "
          f"{run.wall_s:.1f} s: {run.rate:,.0f} rows/s; output {run.output_rows:,} rows; "
          f"state peak {run.peak_rows:,} rows, final {run.final('numRowsTotal'):,} rows / "
          f"{run.final('memoryUsedBytes'):,} B mem / {run.final('rocksdbSstFileSize'):,} B sst"
          + (f"; FAILED {run.error}" if run.error else ""), flush=True)
    return run


# -- report -------------------------------------------------------------------------------

def mib(b: int) -> str:
    return fmt_float(b / 2**20, 1)


def render_ops(runs: list[Run], natives: dict[str, Run]) -> str:
    rows = []
    for r in runs:
        if r.error:
            rows.append([r.name, "failed: " + r.error, *["-"] * 9])
            continue
        n = natives.get(r.name)
        native = "-" if n is None else ("failed" if n.error else fmt_int(n.rate))
        ratio = "-" if n is None or n.error or not r.rate else f"{n.rate / r.rate:.2f}x"
        rows.append([r.name, fmt_int(r.input_rows), str(len(r.data_batch_ms)),
                     fmt_float(r.batch_ms / 1000), fmt_int(r.rate), native, ratio,
                     fmt_int(r.peak_rows), fmt_int(r.final("numRowsTotal")),
                     mib(r.final("memoryUsedBytes")), mib(r.final("rocksdbSstFileSize"))])
    return table(["operator", "input rows", "data batches", "batch time s", "rows/s",
                  "native rows/s", "native / ours", "state rows (peak)", "state rows (end)",
                  "state mem MiB (end)", "RocksDB SST MiB (end)"], rows)


def render_late(late: dict[str, list[Run]]) -> str:
    def med(runs: list[Run]) -> float | None:
        ms = [statistics.median(r.data_batch_ms) for r in runs if not r.error and r.data_batch_ms]
        return statistics.median(ms) if ms else None

    def total(runs: list[Run]) -> float | None:
        s = [r.batch_ms / 1000 for r in runs if not r.error]
        return statistics.median(s) if s else None

    base = med(late["without"])
    rows = []
    for name, runs in late.items():
        m, t = med(runs), total(runs)
        ok = [r for r in runs if not r.error]
        rows.append([name, "-" if m is None else fmt_int(m),
                     "-" if t is None else fmt_float(t),
                     fmt_int(statistics.median(r.rate for r in ok)) if ok else "-",
                     fmt_int(ok[0].output_rows) if ok else "-",
                     "-" if m is None or base is None else f"{m / base:.2f}x"])
    return table(["windowed count, tumbling 1 min", "median data batch ms", "all batches s",
                  "rows/s", "output rows", "vs without"], rows)


# -- main ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, "streaming_ops")
    ap.add_argument("--events", type=int, default=100_000, help="events per operator run")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct keys")
    ap.add_argument("--rate", type=int, default=1_000,
                    help="events per second of event time")
    ap.add_argument("--batch", type=int, default=50_000,
                    help="maxOffsetsPerTrigger (per source)")
    ap.add_argument("--operators", default=",".join(OPERATORS),
                    help=f"comma-separated subset of {', '.join(OPERATORS)}, or none")
    ap.add_argument("--late-events", type=int, default=150_000,
                    help="events of the side-output comparison (0 skips it)")
    ap.add_argument("--late-keys", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=2, help="runs per side-output variant")
    args = ap.parse_args(argv)
    ops = [] if args.operators == "none" else [o.strip() for o in args.operators.split(",")]
    unknown = set(ops) - set(OPERATORS)
    if unknown:
        ap.error(f"unknown operators {sorted(unknown)}")

    from headrace.testing import EmbeddedBroker

    env = show_environment()
    work = Path(tempfile.mkdtemp(prefix="bench-streaming-ops-"))
    runs: list[Run] = []
    natives: dict[str, Run] = {}
    late: dict[str, list[Run]] = {}
    started = time.monotonic()
    try:
        with EmbeddedBroker(data_dir=work / "broker") as broker:
            bs = broker.bootstrap_servers
            topics = {"events": "events", "table": "table", "payments": "payments",
                      "late": "late", "warm": "warm"}
            create_topics(bs, topics.values())
            topics["keys"] = str(args.keys)
            t = time.perf_counter()
            produce(bs, "warm", events(2_000, 100, args.rate, seed=9))
            if ops:
                produce(bs, "events", events(args.events, args.keys, args.rate))
            if {"latest_join", "temporal_join", "table_join"} & set(ops):
                produce(bs, "table", table_rows(args.keys, args.events, args.rate))
            if "interval_join" in ops:
                produce(bs, "payments", payments(args.events, args.keys, args.rate))
            if args.late_events:
                produce(bs, "late", events(args.late_events, args.late_keys, args.rate,
                                           seed=5, late_fraction=LATE_FRACTION))
            print(f"produced the input in {time.perf_counter() - t:.1f} s", flush=True)

            spark = streaming_session()
            src = Sources(spark, bs, args.batch)
            # Warm-up: Python workers, the source, transformWithState's first start.
            run_query("warm-up", build("tumbling", src, {"events": "warm"}), work)
            for op in ops:
                runs.append(run_query(op, build(op, src, topics), work))
                native = build_native(op, src, topics)
                if native is not None:
                    natives[op] = run_query(f"{op} (native)", native, work)
            if args.late_events:
                late = run_late(src, work, args.repeats)
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - started
    print(f"total {elapsed:.0f} s; load average at the end: "
          f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    body = []
    if runs:
        body += [f"Operators: {args.events:,} events over {args.keys:,} keys, "
                 f"maxOffsetsPerTrigger {args.batch:,}", "", render_ops(runs, natives), ""]
    if late:
        body += [f"Late-data side output: {args.late_events:,} events over "
                 f"{args.late_keys:,} keys, ~1 % late", "", render_late(late)]
    publish("streaming_ops", "Event-time operators (headrace.streaming)", env,
            "\n".join(body), notes(args, elapsed, runs, natives), args.write_md, args.md_file)
    failed = [*runs, *natives.values(), *(r for v in late.values() for r in v)]
    return 1 if any(r.error for r in failed) else 0


def run_late(src: Sources, work: Path, repeats: int) -> dict[str, list[Run]]:
    from pyspark.sql import functions as F

    from headrace.streaming import count, tumbling, windowed

    # Late rows need several micro-batches: a fixed batch size, whatever --batch is.
    late_src = Sources(src.spark, src.bs, LATE_BATCH)

    def source() -> Any:
        return late_src.read("late", EVENT_SCHEMA, "k", "amount", "event_time")

    def tws() -> Any:
        return windowed(source(), keys=["k"], event_time="event_time",
                        window=tumbling("1 minute"), aggs=[count()], watermark="10 seconds")

    variants: dict[str, Callable[[], Any]] = {
        "Spark native (late rows dropped)": lambda: source()
        .withWatermark("event_time", "10 seconds")
        .groupBy(F.window("event_time", "1 minute"), "k").count(),
        "without": lambda: tws().where("kind = 'result'"),
        "with": tws,
    }
    out: dict[str, list[Run]] = {name: [] for name in variants}
    for i in range(repeats):
        order = list(variants) if i % 2 == 0 else list(variants)[::-1]
        for name in order:
            out[name].append(run_query(f"late {name} #{i + 1}", variants[name](), work))
    return out


def notes(args: argparse.Namespace, elapsed: float, runs: list[Run],
          natives: dict[str, Run]) -> list[str]:
    out = []
    tws = [r for r in runs if not r.error and r.rate and r.name not in ("source",
                                                                        "interval_join")]
    if tws and args.keys < 1_000_000:
        lo, hi = min(r.rate for r in tws), max(r.rate for r in tws)
        out.append(
            f"sizes: {args.keys:,} keys; at the operators' {fmt_int(lo)}-{fmt_int(hi)} "
            f"rows/s measured here a 1M-key run (1M events) takes {1e6 / hi / 60:.1f}-"
            f"{1e6 / lo / 60:.1f} min per operator (`--events 1000000 --keys 1000000`)")
    if natives:
        out.append("native = Spark's own operator on the same input in the same run "
                   "(`withWatermark` 10 s + `groupBy(window | session_window, k)` count + "
                   "sum, append): the same output rows, without allowed lateness or a "
                   "late side output; none exists for per-event sliding windows or "
                   "stream-table joins")
    return [
        *out,
        "shared machine: other engineers' tests and benchmarks ran at the same time (see "
        f"the load average above; {' / '.join(f'{x:.2f}' for x in os.getloadavg())} at the "
        "end), so the figures are indicative, not a clean-room measurement",
        f"events: JSON `{EVENT_SCHEMA}` in a {PARTITIONS}-partition topic, keys uniform, "
        f"event time {args.rate:,} events/s with up to {DISORDER_MS // 1000} s disorder; "
        "read with `read_events` (parsing in the source task), `maxOffsetsPerTrigger` "
        f"{args.batch:,} per source, `Trigger.AvailableNow`, `noop` sink; a 2,000-event "
        "warm-up query first",
        "rows/s = input rows (both sides for joins) / sum of `triggerExecution` over all "
        "micro-batches (no-data batches that only fire timers included); state = "
        "`stateOperators[*]` (`numRowsTotal`, `memoryUsedBytes`, custom metric "
        "`rocksdbSstFileSize`), summed over the stateful operators; peak = largest "
        "`numRowsTotal` of any micro-batch",
        "windowed: count + sum, watermark 10 s, no allowed lateness; tumbling 1 min, "
        "hopping 1 min / 20 s, session gap 30 s, sliding 1 min (one window per event). "
        "latest/temporal join: one table row per key over the same event-time span; "
        "table join: the events as orders (primary key = the event key) joined with the "
        "table as products, an order's product a hash of its key and amount (so an update "
        "moves it); "
        "interval join: the toolkit's (on transformWithState), a payment 0-60 s after every second event; "
        "detector: the fraud pipeline's per-card detector, each event a transaction of "
        "card = user = its key, one city, a fixed profile",
        "side output: with = results and late rows reach the sink; without = only "
        "`kind = 'result'` rows (the processor still builds the late rows); native = "
        "`withWatermark` + `groupBy(window(1 min), k).count()` append; "
        f"{args.repeats} runs each, alternating, `maxOffsetsPerTrigger` {LATE_BATCH:,}; "
        "goal with / without <= 1.15",
        f"whole script: {elapsed / 60:.1f} min",
    ]


if __name__ == "__main__":
    sys.exit(main())
