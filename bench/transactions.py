"""Transactional against plain produce throughput of headrace and Tansu, with librdkafka.

Usage::

    .venv/bin/python bench/transactions.py                # full run, headrace and Tansu
    .venv/bin/python bench/transactions.py --quick        # smoke run (1 s per producer)
    .venv/bin/python bench/transactions.py --write-md     # also refresh BENCHMARKS.md
    .venv/bin/python bench/transactions.py --brokers all --sizes 1024 --partitions 8

Cells are record size (100 B, 1024 B) x partitions (1, 8). Three librdkafka producers are
compared:

- ``transactional``: ``transactional.id`` set; ``begin_transaction()``, then ``produce()``
  as fast as possible for ``--interval-ms`` (100 ms), then ``commit_transaction()``, again
  and again (the commits are inside the timing);
- ``idempotent``: the same settings with ``enable.idempotence=true`` and no transactions,
  the fair comparison (the transactional producer is idempotent too, with at most 5
  requests in flight per connection);
- ``plain``: the same settings without idempotence (acks=all, librdkafka's default of up
  to 1,000,000 requests in flight).

Settings shared by the three: acks=all, linger.ms=5, batch.size=1000000, no compression, a
64 MiB local queue (so that a producer cannot run far ahead of the broker; ``produce()``
waits when it is full), records spread round-robin over the partitions by explicit
partition number. Plain and idempotent turns are timed from the first ``produce()`` until
``flush()`` returns.

Each producer gets ``--duration`` seconds per cell and broker, split into ``--rounds``
turns. Every turn runs on a freshly started broker with a fresh topic and producer, after
an untimed warm-up, so that no turn inherits another's data (on some machines a broker
writes its first GB faster than the next ones). Turns are interleaved: within a cell,
round by round, producer by producer (reverse order on odd rounds), broker by broker, so
drift in the machine's load hits them alike.

Checks after each turn, outside the timing: the transactional producer writes one more
transaction of 1,000 records (values told apart from the others) and aborts it, after
``flush()`` so that they reach the broker. Then for every partition: the end offset
(ListOffsets latest, read_uncommitted) must equal its data records plus one control record
per transaction that touched it, and the last stable offset (read_committed) the same (no
transaction left open); a read_committed consumer reading the transactional topic from the
start must get exactly the records of the committed transactions, none of the aborted one.
The other topics are read back (read_uncommitted) only if their end offsets disagree, to
tell lost records from wrong end offsets.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from brokers import (
    ALL_SPECS,
    BrokerSpec,
    add_brokers_option,
    admin,
    create_topic,
    running,
)
from clients import CONSUMER_CONFIG, PRODUCER_CONFIG, DeliveryErrors, cpu_seconds, payload
from report import (
    arguments,
    fmt_float,
    fmt_int,
    fmt_ratio,
    publish,
    show_environment,
    table,
)

MODES = ("transactional", "idempotent", "plain")
GOAL = 0.90  # transactions may cost at most 10% of the idempotent producer's throughput

# Shared by the three producers; the mode adds idempotence and/or a transactional.id.
BASE_CONFIG: dict[str, object] = {
    **PRODUCER_CONFIG,
    "acks": "all",
    "enable.idempotence": False,
    "queue.buffering.max.kbytes": 64 * 1024,
}
MODE_CONFIG: dict[str, dict[str, object]] = {
    "transactional": {"enable.idempotence": True},  # plus transactional.id, per cell
    "idempotent": {"enable.idempotence": True},
    "plain": {},
}

ABORTED_RECORDS = 1_000
WARMUP_S = 0.3
CHECK_EVERY = 32  # produce() calls between clock readings
POLL_EVERY = 20_000  # produce() calls between poll(0)s
TXN_TIMEOUT_S = 60.0
FLUSH_TIMEOUT_S = 120.0
CONSUME_IDLE_TIMEOUT_S = 30.0

clock = time.perf_counter


@dataclass(frozen=True)
class Cell:
    size: int
    partitions: int

    @property
    def label(self) -> str:
        return f"{self.size} B x {self.partitions}p"


@dataclass
class Tally:
    """What one producer has written to its topic, per partition (the checks' expectations)."""

    partitions: int
    committed: list[int] = field(default_factory=list)  # data records (all, if no txns)
    aborted: list[int] = field(default_factory=list)
    markers: list[int] = field(default_factory=list)  # control records (one per txn touching it)
    next_index: int = 0  # round-robin position of the next record

    def __post_init__(self) -> None:
        self.committed = [0] * self.partitions
        self.aborted = [0] * self.partitions
        self.markers = [0] * self.partitions

    def add(self, n: int, *, txn: bool = False, aborted: bool = False) -> None:
        """Account ``n`` records sent round-robin from ``next_index`` (one transaction if txn)."""
        q, r = divmod(n, self.partitions)
        for k in range(self.partitions):
            p = (self.next_index + k) % self.partitions
            c = q + (1 if k < r else 0)
            (self.aborted if aborted else self.committed)[p] += c
            if txn and c:
                self.markers[p] += 1
        self.next_index = (self.next_index + n) % self.partitions


@dataclass
class ModeResult:
    """One producer's timed turns in one cell, summed."""

    mode: str
    records: int = 0
    seconds: float = 0.0
    broker_cpu_s: float = 0.0
    txns: int = 0
    commit_s: list[float] = field(default_factory=list)
    check: str = "-"
    check_details: str = ""
    error: str | None = None

    def rate(self) -> float | None:
        return self.records / self.seconds if self.error is None and self.seconds > 0 else None

    def mb_per_s(self, size: int) -> float | None:
        r = self.rate()
        return None if r is None else r * size / 1e6


@dataclass
class Result:
    spec: BrokerSpec
    cell: Cell
    modes: dict[str, ModeResult]

    def rate(self, mode: str) -> float | None:
        return self.modes[mode].rate()


class Run:
    """One producer, its topic and its tally, within one cell."""

    def __init__(self, mode: str, bootstrap: str, cell: Cell, transactional_id: str) -> None:
        self.mode = mode
        self.topic = f"bench-{mode}-{cell.size}b-{cell.partitions}p"
        self.partitions = cell.partitions
        self.value = payload(cell.size)
        self.aborted_value = b"\xab" * cell.size  # told apart when read back
        self.tally = Tally(cell.partitions)
        self.errors = DeliveryErrors()
        config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            **BASE_CONFIG,
            **MODE_CONFIG[mode],
            "delivery.report.only.error": True,
            "on_delivery": self.errors,
        }
        if mode == "transactional":
            config["transactional.id"] = transactional_id
        self.producer = Producer(config)
        self.producer.list_topics(self.topic, timeout=10.0)  # connection and metadata
        if mode == "transactional":
            self.producer.init_transactions(TXN_TIMEOUT_S)

    def _raise_errors(self) -> None:
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} delivery errors, first: {self.errors[0]}")

    def _produce_until(self, until: float) -> int:
        """``produce()`` round-robin as fast as possible until ``until``; the count sent."""
        send, poll = self.producer.produce, self.producer.poll
        topic, value, parts = self.topic, self.value, self.partitions
        i = first = last_poll = self.tally.next_index
        while clock() < until:
            for _ in range(CHECK_EVERY):
                try:
                    send(topic, value, partition=i % parts)
                except BufferError:  # local queue full: let librdkafka drain it
                    poll(0.001)
                    break
                i += 1
            if i - last_poll >= POLL_EVERY:
                poll(0)
                last_poll = i
        return i - first

    def _produce_exactly(self, n: int, value: bytes) -> None:
        send, poll = self.producer.produce, self.producer.poll
        i = self.tally.next_index
        for k in range(n):
            while True:
                try:
                    send(self.topic, value, partition=(i + k) % self.partitions)
                    break
                except BufferError:
                    poll(0.001)

    def turn(self, seconds: float, interval_s: float, out: ModeResult | None) -> None:
        """Produce for ``seconds``; add the figures to ``out`` (None: warm-up, not timed)."""
        producer = self.producer
        records = txns = 0
        commits: list[float] = []
        start = clock()
        deadline = start + seconds
        if self.mode == "transactional":
            while clock() < deadline:
                producer.begin_transaction()
                n = self._produce_until(clock() + interval_s)
                t = clock()
                producer.commit_transaction(TXN_TIMEOUT_S)
                commits.append(clock() - t)
                self._raise_errors()
                self.tally.add(n, txn=True)
                records += n
                txns += 1
        else:
            records = self._produce_until(deadline)
            remaining = producer.flush(FLUSH_TIMEOUT_S)
            if remaining:
                raise RuntimeError(f"{remaining} records unacknowledged after {FLUSH_TIMEOUT_S}s")
            self._raise_errors()
            self.tally.add(records)
        elapsed = clock() - start
        if out is not None:
            out.records += records
            out.seconds += elapsed
            out.txns += txns
            out.commit_s.extend(commits)

    def abort_one(self) -> None:
        """One aborted transaction of ABORTED_RECORDS records, flushed to the broker first."""
        self.producer.begin_transaction()
        self._produce_exactly(ABORTED_RECORDS, self.aborted_value)
        remaining = self.producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            raise RuntimeError(f"{remaining} records of the aborted transaction not delivered")
        self._raise_errors()
        self.producer.abort_transaction(TXN_TIMEOUT_S)
        self.tally.add(ABORTED_RECORDS, txn=True, aborted=True)

    def close(self) -> None:
        self.producer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int, iso: IsolationLevel) -> list[int]:
    client = admin(bootstrap)  # kept referenced until the futures resolve
    futures = client.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
        isolation_level=iso,
        request_timeout=30.0,
    )
    by_p = {tp.partition: f.result(30.0).offset for tp, f in futures.items()}
    return [int(by_p[p]) for p in range(partitions)]


def read_counts(
    bootstrap: str, run: Run, size: int, committed_only: bool
) -> tuple[list[int], list[int]]:
    """Records per partition read back to the end: (all, of them from aborted transactions).

    ``committed_only`` reads with isolation.level=read_committed (else read_uncommitted).
    """
    parts = run.partitions
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            **CONSUMER_CONFIG,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
            "enable.partition.eof": True,
        }
    )
    counts, aborted = [0] * parts, [0] * parts
    at_end: set[int] = set()
    try:
        consumer.assign([TopicPartition(run.topic, p, OFFSET_BEGINNING) for p in range(parts)])
        last_progress = time.monotonic()
        while len(at_end) < parts:
            batch = consumer.consume(10_000, 0.5)
            if not batch and time.monotonic() - last_progress > CONSUME_IDLE_TIMEOUT_S:
                raise RuntimeError(f"consumer stalled at {sum(counts):,} records")
            for m in batch:
                err, p = m.error(), m.partition()
                assert p is not None
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(p)
                        continue
                    raise RuntimeError(f"consume error: {err}")
                value = m.value() or b""
                if len(value) != size:
                    raise RuntimeError(f"record of {len(value)} bytes, expected {size}")
                counts[p] += 1
                if value == run.aborted_value:
                    aborted[p] += 1
                at_end.discard(p)
            if batch:
                last_progress = time.monotonic()
    finally:
        consumer.close()
    return counts, aborted


def _spread(name: str, got: list[int], want: list[int]) -> str | None:
    """One line for the partitions where ``got`` differs from ``want``, or None."""
    bad = [p for p in range(len(got)) if got[p] != want[p]]
    if not bad:
        return None
    diffs = sorted(got[p] - want[p] for p in bad)
    by = f"{diffs[0]:+,}" if diffs[0] == diffs[-1] else f"{diffs[0]:+,} to {diffs[-1]:+,}"
    p = bad[0]
    return (
        f"{name} off by {by} on {len(bad)}/{len(got)} partitions "
        f"(p{p}: {got[p]:,}, expected {want[p]:,})"
    )


def check(bootstrap: str, run: Run, size: int) -> tuple[str, str]:
    """(short verdict, details) of the checks described in the module docstring.

    The transactional topic is always read back (read_committed); the others only when
    ListOffsets disagrees with the tally, to tell lost records from a wrong end offset.
    Verdicts: ``ok``; ``ok, ListOffsets wrong`` (every record is there, but the end offsets
    the broker reports are not); ``FAILED: ...`` (records missing, extra or aborted ones
    returned to read_committed, or an error).
    """
    t, parts, txn = run.tally, run.partitions, run.mode == "transactional"
    written = [t.committed[p] + t.aborted[p] + t.markers[p] for p in range(parts)]
    offsets: list[str] = []  # ListOffsets disagreeing with the tally
    problems: list[str] = []  # records missing, extra or from aborted transactions
    verdict = ""
    try:
        ends = end_offsets(bootstrap, run.topic, parts, IsolationLevel.READ_UNCOMMITTED)
        stable = end_offsets(bootstrap, run.topic, parts, IsolationLevel.READ_COMMITTED)
        for line in (
            _spread("end offset (ListOffsets latest, read_uncommitted)", ends, written),
            _spread("last stable offset (ListOffsets latest, read_committed)", stable, written),
        ):
            if line is not None:
                offsets.append(line)
        if txn or offsets:
            counts, aborted = read_counts(bootstrap, run, size, committed_only=txn)
            how = "read_committed" if txn else "read_uncommitted"
            want = [t.committed[p] + (0 if txn else t.aborted[p]) for p in range(parts)]
            if txn and any(aborted):
                verdict = "FAILED: aborted records read"
                problems.append(
                    f"{how} consumer returned {sum(aborted):,} of the {sum(t.aborted):,} "
                    f"records of the aborted transaction ({sum(1 for a in aborted if a)}/{parts}"
                    " partitions)"
                )
                counts = [counts[p] - aborted[p] for p in range(parts)]
            line = _spread(f"{how} consumer's record count", counts, want)
            if line is not None:
                verdict = verdict or (
                    "FAILED: records missing"
                    if sum(counts) < sum(want)
                    else "FAILED: records extra"
                )
                problems.append(line)
    except Exception as e:
        verdict = verdict or "FAILED: error"
        problems.append(f"{type(e).__name__}: {e}")
    details = "; ".join(problems + offsets)
    if problems:
        return verdict, details
    if offsets:
        return "ok, ListOffsets wrong", "every record read back, but " + details
    return "ok", ""


def _fail(e: BaseException) -> str:
    traceback.print_exc()
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


_VERDICT_RANK = {"-": -1, "ok": 0, "ok, ListOffsets wrong": 1}  # else 2: FAILED


def run_turn(
    spec: BrokerSpec, cell: Cell, mode: str, seconds: float, interval_s: float, res: ModeResult
) -> str:
    """One timed turn of one producer on a freshly started broker, checked; adds it to ``res``.

    Returns a progress line. Every turn starting from an empty broker keeps the turns alike:
    on some machines a broker writes its first GB faster than the next (page cache).
    """
    txn = mode == "transactional"
    with running(spec) as broker:
        bs = broker.bootstrap_servers
        cpu: Callable[[], float] = cpu_seconds(broker.pid)
        create_topic(bs, f"bench-{mode}-{cell.size}b-{cell.partitions}p", cell.partitions)
        run = Run(mode, bs, cell, f"bench-txn-{cell.size}b-{cell.partitions}p")
        try:
            run.turn(WARMUP_S, interval_s, None)
            before = (res.records, res.seconds, res.txns)
            cpu0 = cpu()
            run.turn(seconds, interval_s, res)
            res.broker_cpu_s += cpu() - cpu0
            n, secs, k = res.records - before[0], res.seconds - before[1], res.txns - before[2]
            line = f"{fmt_int(n / secs)} rec/s {fmt_float(n * cell.size / 1e6 / secs)} MB/s"
            line += f" ({n:,} records in {secs:.2f}s"
            if txn and k:
                recent = res.commit_s[-k:]
                line += (
                    f", {k} transactions, commit median {statistics.median(recent) * 1e3:.1f} ms,"
                    f" max {max(recent) * 1e3:.1f} ms"
                )
            line += ")"
            verdict, details = "ok", ""
            if txn:
                try:
                    run.abort_one()
                except Exception as e:
                    verdict, details = "FAILED: abort", _fail(e)
            if verdict == "ok":
                verdict, details = check(bs, run, cell.size)
        finally:
            run.close()
    line += f"; check: {verdict}" + (f" ({details})" if details else "")
    # The producer's verdict is its worst turn's, with that turn's details.
    if _VERDICT_RANK.get(verdict, 2) > _VERDICT_RANK.get(res.check, 2):
        res.check, res.check_details = verdict, details
    return line


def _ratio(num: float | None, den: float | None) -> str:
    return fmt_ratio(num, den).rstrip("x") if num is not None and den else "-"


def render_summary(results: list[Result]) -> str:
    cells = list(dict.fromkeys(r.cell for r in results))
    by = {(r.spec.kind, r.spec.fsync, r.cell): r for r in results}
    specs = list(dict.fromkeys(r.spec for r in results))
    tansu = next((s for s in specs if s.kind == "tansu"), None)
    rows: list[list[str]] = []
    for cell in cells:
        for spec in specs:
            r = by.get((spec.kind, spec.fsync, cell))
            if r is None:
                continue
            head = [spec.name, f"{cell.size} B", str(cell.partitions)]
            tx, idem, plain = r.rate("transactional"), r.rate("idempotent"), r.rate("plain")
            t = by.get((tansu.kind, tansu.fsync, cell)) if tansu and spec != tansu else None
            goal = "-" if tx is None or not idem else ("yes" if tx / idem >= GOAL else "no")
            verdicts: dict[str, list[str]] = {}  # what went wrong -> for which producers
            for m in MODES:
                res = r.modes[m]
                what = f"failed: {res.error}" if res.error is not None else res.check
                if what not in ("ok", "-"):
                    verdicts.setdefault(what.removeprefix("ok, "), []).append(m)
            rows.append(
                [
                    *head,
                    _ratio(tx, idem),
                    _ratio(tx, plain),
                    goal,
                    *(fmt_ratio(r.rate(m), t.rate(m)) if t is not None else "-" for m in MODES),
                    "; ".join(f"{w} ({', '.join(ms)})" for w, ms in verdicts.items()),
                ]
            )
    return table(
        [
            "broker",
            "record",
            "partitions",
            "txn / idempotent",
            "txn / plain",
            f">= {GOAL:.2f}",
            "txn vs Tansu",
            "idempotent vs Tansu",
            "plain vs Tansu",
            "notes",
        ],
        rows,
    )


def render_detail(results: list[Result]) -> str:
    rows: list[list[str]] = []
    for r in results:
        for mode in MODES:
            m = r.modes[mode]
            head = [r.spec.name, f"{r.cell.size} B", str(r.cell.partitions), mode]
            err = m.error
            rate = m.rate()
            if err is not None or rate is None:
                rows.append([*head, *["-"] * 7, f"failed: {err}"])
                continue
            is_txn = mode == "transactional" and m.commit_s
            rows.append(
                [
                    *head,
                    fmt_int(m.records),
                    fmt_int(rate),
                    fmt_float(rate * r.cell.size / 1e6),
                    fmt_float(m.broker_cpu_s / m.records * 1e6, 2),
                    fmt_int(m.txns) if is_txn else "-",
                    fmt_float(statistics.median(m.commit_s) * 1e3) if is_txn else "-",
                    fmt_float(max(m.commit_s) * 1e3) if is_txn else "-",
                    m.check,
                ]
            )
    return table(
        [
            "broker",
            "record",
            "partitions",
            "producer",
            "records",
            "rec/s",
            "MB/s",
            "broker CPU us/rec",
            "transactions",
            "commit p50 ms",
            "commit max ms",
            "check",
        ],
        rows,
    )


def notes(duration_s: float, rounds: int, interval_ms: float) -> list[str]:
    return [
        f"transactional: begin_transaction(), produce() as fast as possible for {interval_ms:g} "
        "ms, commit_transaction(), repeated; the time includes the commits (each waits until "
        "every record of its transaction is acknowledged, then for EndTxn and its markers)",
        "idempotent: same settings, enable.idempotence=true, no transactions (at most 5 "
        "requests in flight, like the transactional producer): the fair comparison; plain: "
        "same settings, no idempotence (up to 1,000,000 requests in flight); both timed from "
        "the first produce() until flush() returns",
        "shared producer settings: acks=all, linger.ms=5, batch.size=1000000, no compression, "
        "queue.buffering.max.kbytes=65536 (produce() waits when the local queue is full), "
        "round-robin over partitions by explicit partition number",
        f"each producer {duration_s:g} s per cell and broker in {rounds} turn(s), every turn "
        f"on a freshly started broker after a {WARMUP_S:g} s untimed warm-up; turns "
        "interleaved (round by round, producer by producer, broker by broker); headrace "
        "writes to its data directory without --fsync, Tansu stores in memory",
        f"txn / idempotent >= {GOAL:.2f} is the goal (transactions cost at most 10%); "
        '"vs Tansu" = headrace records/s / Tansu records/s for the same producer and cell',
        "check, after every turn (outside the timing): after one more transaction of "
        f"{ABORTED_RECORDS:,} records, flushed then aborted, every partition's end offset "
        "(ListOffsets) = its data records + one control record per transaction that touched "
        "it, last stable offset = end offset, and a read_committed consumer reading the "
        "transactional topic from the start gets exactly the committed records of each "
        "partition, none of the aborted ones; the other topics are read back only when their "
        'end offsets disagree; "ok, ListOffsets wrong" = every record read back, but the end '
        "offsets reported by the broker are not the log's",
        "MB = 10^6 bytes of record values; broker CPU us/rec = broker process CPU time (user + "
        "system) during the timed turns / records; client and broker share the machine's cores",
    ]


def check_lines(results: list[Result]) -> list[str]:
    return [
        f"check {r.spec.name} {r.cell.label} {m.mode}: {m.check}: {m.check_details}"
        for r in results
        for m in r.modes.values()
        if m.check_details
    ] + [
        f"FAILED {r.spec.name} {r.cell.label} {m.mode}: {m.error}"
        for r in results
        for m in r.modes.values()
        if m.error
    ]


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, "transactions")
    add_brokers_option(ap, ALL_SPECS, "headrace,tansu")
    ap.add_argument("--sizes", default="100,1024", help="record value sizes in bytes")
    ap.add_argument("--partitions", default="1,8", help="partition counts")
    ap.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds per producer per cell and broker (default 3; --quick 1)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="turns per producer per cell and broker (default 2; --quick 1)",
    )
    ap.add_argument(
        "--interval-ms", type=float, default=100.0, help="time spent producing per transaction"
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 s per producer, 1 turn")
    args = ap.parse_args(argv)

    duration = args.duration if args.duration is not None else (1.0 if args.quick else 3.0)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 2)
    interval_s = args.interval_ms / 1000.0
    specs: list[BrokerSpec] = args.brokers
    cells = [
        Cell(int(s), int(p)) for s in args.sizes.split(",") for p in args.partitions.split(",")
    ]

    env = show_environment()
    started = time.monotonic()
    results: list[Result] = []
    for cell in cells:
        by_spec = {spec: Result(spec, cell, {m: ModeResult(m) for m in MODES}) for spec in specs}
        for r in range(rounds):
            for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
                for spec in specs:
                    res = by_spec[spec].modes[mode]
                    if res.error is not None:
                        continue
                    try:
                        line = run_turn(spec, cell, mode, duration / rounds, interval_s, res)
                    except Exception as e:  # one broken turn must not lose the others' figures
                        res.error = _fail(e)
                        line = f"FAILED {res.error}"
                    print(f"[{cell.label}] {spec.name} {mode} round {r + 1}: {line}", flush=True)
        results.extend(by_spec.values())
    took = time.monotonic() - started
    # Other work during the run skews the figures too: say how busy the machine was at the end.
    env.append(
        f"load average at end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"(1 / 5 / 15 min), after {took:.0f} s"
    )
    print(f"\n{env[-1]}\n")

    failed = any(m.error for r in results for m in r.modes.values())
    mismatched = any(m.check.startswith("FAILED") for r in results for m in r.modes.values())
    publish(
        "transactions",
        "Transactions: transactional against plain produce",
        env,
        f"{render_summary(results)}\n\n{render_detail(results)}",
        notes(duration, rounds, args.interval_ms) + check_lines(results),
        args.write_md,
        args.md_file,
    )
    return 1 if failed or mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
