"""Change data capture from PostgreSQL, end to end: a pgbench-style write load captured by
``headrace cdc postgres`` into a broker and, on a second replication slot of the same
database under the same load, by Debezium's PostgreSQL connector in its embedded engine
(``jvm/debezium``).

Usage::

    .venv/bin/python bench/cdc.py                     # 4 writer threads, 20 s, both sides
    .venv/bin/python bench/cdc.py --writers 8 --seconds 60 --only headrace
    .venv/bin/python bench/cdc.py --seconds 20 --write-md   # refresh BENCHMARKS.md

Starts a throwaway PostgreSQL (wal_level=logical, fsync off), a headrace broker, the
connector process and Debezium's JVM (separate processes), creates pgbench's tables
(accounts, tellers, branches, history; ``--accounts`` accounts) and lets each side snapshot
them in turn, then runs pgbench's TPC-B-like transaction (three updates and an insert) from
``--writers`` threads for ``--seconds`` while both sides stream. headrace: a read_committed
consumer follows the four topics. Debezium: its engine's handler prints each event as it
gets it (it writes to no broker, so it does less work than headrace: no Kafka transaction).
Reported per side: change events/s captured (from the load's start until every change is
out) and the latency of every change read during the load, from its commit in PostgreSQL
(``source.ts_ms``, which both sides take from the commit record) until it is readable
(headrace) or printed by the handler and read by this script (Debezium).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg2
from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.cdc.support import ConnectorProcess, execute, query

import report
from headrace import jvm
from headrace.testing import EmbeddedBroker, PostgresServer

TABLES = ("accounts", "tellers", "branches", "history")
EVENTS_PER_TX = 4
DRAIN_S = 120.0  # how long either side may take to catch up after the load


def _schema(dsn: str, accounts: int) -> None:
    execute(dsn, "CREATE TABLE branches (bid int PRIMARY KEY, bbalance int)",
            "CREATE TABLE tellers (tid int PRIMARY KEY, bid int, tbalance int)",
            "CREATE TABLE accounts (aid int PRIMARY KEY, bid int, abalance int, "
            "filler char(84))",
            "CREATE TABLE history (hid bigserial PRIMARY KEY, tid int, bid int, aid int, "
            "delta int, mtime timestamp)",
            "INSERT INTO branches SELECT g, 0 FROM generate_series(1, 10) g",
            "INSERT INTO tellers SELECT g, 1 + g % 10, 0 FROM generate_series(1, 100) g",
            f"INSERT INTO accounts SELECT g, 1 + g % 10, 0, '' FROM generate_series(1, {accounts}) g")


def _writer(dsn: str, accounts: int, stop: threading.Event, counts: list[int]) -> None:
    rng = random.Random()
    conn = psycopg2.connect(dsn)
    with conn.cursor() as cur:
        while not stop.is_set():
            aid, tid, bid = rng.randint(1, accounts), rng.randint(1, 100), rng.randint(1, 10)
            delta = rng.randint(-5000, 5000)
            cur.execute("UPDATE accounts SET abalance = abalance + %s WHERE aid = %s", (delta, aid))
            cur.execute("UPDATE tellers SET tbalance = tbalance + %s WHERE tid = %s", (delta, tid))
            cur.execute("UPDATE branches SET bbalance = bbalance + %s WHERE bid = %s", (delta, bid))
            cur.execute("INSERT INTO history (tid, bid, aid, delta, mtime) VALUES "
                        "(%s, %s, %s, %s, now())", (tid, bid, aid, delta))
            conn.commit()
            counts.append(1)
    conn.close()


class Load:
    """``writers`` threads running the transaction until ``finish``."""

    def __init__(self, dsn: str, accounts: int, writers: int) -> None:
        self.stop = threading.Event()
        self.counts: list[int] = []
        self.threads = [threading.Thread(target=_writer, args=(dsn, accounts, self.stop,
                                                                self.counts))
                        for _ in range(writers)]
        self.start = time.time()
        for t in self.threads:
            t.start()

    def finish(self) -> tuple[int, float, float]:
        """Stop the writers: (transactions committed, seconds of load, wall time it ended)."""
        self.stop.set()
        for t in self.threads:
            t.join()
        end = time.time()
        return len(self.counts), end - self.start, end


class Side:
    """One capturing side's figures: snapshot seconds, events and when each arrived."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.snapshot_s = 0.0
        self.events = 0
        self.done_at = 0.0  # wall time the last expected event arrived (0: never)
        self.latencies: list[float] = []


class Debezium:
    """Debezium's embedded engine on slot (and topic prefix) ``dbz``; a thread stamps every
    printed line with the time it was read, and parses nothing until ``latencies``."""

    def __init__(self, pg: PostgresServer) -> None:
        names = ",".join(f"public.{t}" for t in TABLES)
        self.process = subprocess.Popen(
            [jvm.java_executable(), "-cp", jvm.classpath("debezium"),
             "io.headrace.debezium.DebeziumCapture", pg.host, str(pg.port), "postgres",
             "postgres", "dbz", names, "dbz"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)
        self.lines: list[tuple[float, str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            # only the tables' events: Debezium also passes on logical decoding messages
            # (headrace's heartbeats) as events of its own
            if line.startswith("dbz.public."):
                self.lines.append((time.time(), line))

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _wait_for(count: int, lines: Sequence[object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while len(lines) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"bench/cdc.py: {what}: {len(lines):,} of {count:,} events "
                             f"after {timeout:.0f} s")
        time.sleep(0.05)


def _consumer(bootstrap: str) -> Consumer:
    """A read_committed consumer of the four topics from just after the snapshot."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "b",
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 5})
    ends = []
    for t in TABLES:
        _low, high = consumer.get_watermark_offsets(TopicPartition(f"bench.public.{t}", 0))
        ends.append(TopicPartition(f"bench.public.{t}", 0, high))
    consumer.assign(ends)
    return consumer


def run(args: argparse.Namespace, pg: PostgresServer, broker: EmbeddedBroker) -> tuple[
        int, float, list[Side]]:
    """Snapshot, load and capture; (transactions committed, seconds of load, sides)."""
    seconds, accounts, writers = args.seconds, args.accounts, args.writers
    _schema(pg.dsn, accounts)
    snapshot_rows = accounts + 110
    sides = []
    ours, theirs = Side("headrace"), Side("Debezium")
    connector = consumer = debezium = None
    try:
        if args.only != "debezium":
            sides.append(ours)
            names = ",".join(f"public.{t}" for t in TABLES)
            t0 = time.monotonic()
            connector = ConnectorProcess(pg.dsn, names, broker.bootstrap_servers,
                                         "bench").start()
            ours.snapshot_s = time.monotonic() - t0
            consumer = _consumer(broker.bootstrap_servers)
        if args.only != "headrace":
            sides.append(theirs)
            t0 = time.monotonic()
            debezium = Debezium(pg)
            _wait_for(snapshot_rows, debezium.lines, 300, "Debezium's snapshot")
            theirs.snapshot_s = time.monotonic() - t0
            # every slot must be streaming before the load starts
            deadline = time.monotonic() + 60
            while len(query(pg.dsn, "SELECT 1 FROM pg_replication_slots WHERE active")) < \
                    len(sides):
                if time.monotonic() > deadline:
                    raise SystemExit("bench/cdc.py: Debezium's slot never became active")
                time.sleep(0.1)
            del debezium.lines[:snapshot_rows]
        load = Load(pg.dsn, accounts, writers)
        committed, elapsed, load_end = 0, 0.0, 0.0
        deadline = time.monotonic() + seconds + DRAIN_S
        while time.monotonic() < deadline:
            if not committed and time.time() - load.start >= seconds:
                committed, elapsed, load_end = load.finish()
                if consumer is not None and ours.events >= committed * EVENTS_PER_TX:
                    ours.done_at = load_end
            if committed and (consumer is None or ours.events >= committed * EVENTS_PER_TX) \
                    and (debezium is None or len(debezium.lines) >= committed * EVENTS_PER_TX):
                break
            if consumer is None:
                time.sleep(0.05)
                continue
            for msg in report.receive(consumer, 1000, 0.05):
                value = msg.value()
                if msg.error() or value is None:
                    continue
                now = time.time()
                if not committed:
                    ts_ms = json.loads(value)["source"]["ts_ms"]
                    ours.latencies.append(now * 1000 - ts_ms)
                ours.events += 1
                if committed and ours.events == committed * EVENTS_PER_TX:
                    ours.done_at = now
    finally:
        if consumer is not None:
            consumer.close()
        if debezium is not None:
            debezium.stop()
        if connector is not None:
            connector.stop()
    if debezium is not None:
        theirs.events = len(debezium.lines)
        if theirs.events >= committed * EVENTS_PER_TX > 0:
            theirs.done_at = debezium.lines[committed * EVENTS_PER_TX - 1][0]
        for at, line in debezium.lines:
            if at <= load_end:
                value = json.loads(line.split("\t", 2)[2])
                theirs.latencies.append(at * 1000 - value["source"]["ts_ms"])
    for side in sides:
        side.latencies.sort()
        if side.done_at:
            side.done_at -= load.start
    return committed, elapsed, sides


def main() -> None:
    ap = report.arguments(__doc__, "cdc")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--accounts", type=int, default=100_000)
    ap.add_argument("--only", choices=("headrace", "debezium"),
                    help="run one side alone (default: both at once)")
    args = ap.parse_args()
    with PostgresServer() as pg, EmbeddedBroker() as broker:
        version = query(pg.dsn, "SHOW server_version")[0][0].split()[0]
        env = report.show_environment([
            f"database: PostgreSQL {version} (fsync off), on the same machine; Debezium "
            f"{_debezium_version()} PostgreSQL connector (pgoutput) in its embedded engine"])
        committed, elapsed, sides = run(args, pg, broker)
    expected = committed * EVENTS_PER_TX
    rows = []
    for side in sides:
        lat = side.latencies
        rows.append([
            side.name,
            report.fmt_float(side.snapshot_s),
            report.fmt_int(args.accounts + 110) + " / " + report.fmt_int(
                (args.accounts + 110) / side.snapshot_s) if side.snapshot_s else "-",
            f"{side.events:,} of {expected:,}",
            report.fmt_float(side.done_at) if side.done_at else "never",
            report.fmt_int(side.events / side.done_at) if side.done_at else "-",
            report.fmt_int(report.percentile(lat, 50)) if lat else "-",
            report.fmt_int(report.percentile(lat, 99)) if lat else "-",
            report.fmt_int(len(lat)),
        ])
    body = report.table(
        ["side", "snapshot s", "snapshot rows / rows/s", "events captured", "all out after s",
         "events/s", "p50 ms", "p99 ms", "latency samples"], rows)
    load_after = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    notes = [
        f"Load: pgbench's TPC-B-like transaction (three updates, one insert) on "
        f"{args.accounts:,} accounts from {args.writers} writer threads for "
        f"{elapsed:.1f} s: {committed:,} transactions = {committed / elapsed:,.0f} tx/s, "
        f"{expected:,} row changes, each one change event.",
        f"Only {args.only} ran (`--only`)." if args.only else
        "Both sides stream at the same time from their own replication slots of the same "
        "database, so they see the same transactions and the same machine load (and "
        "compete with each other, the database, the broker and the writers for the cores). "
        "Snapshots ran one after the other before the load, process start included.",
        "events/s: every change event of the load divided by the time from the load's start "
        "until the last one was out; when that time is close to the load's length, the side "
        "kept up and the figure is the load's rate, not the side's limit.",
        "Latency: from the commit in PostgreSQL (`source.ts_ms`, milliseconds) to the event "
        "being readable by a read_committed consumer (headrace: broker, Kafka transaction "
        "and all), or to Debezium's handler printing it and this script reading the line; "
        "only events that arrived while the load ran.",
        "Debezium writes to no broker in this setup (as in the MariaDB section): its handler "
        "only prints, so it does less per event than headrace (no produce, no Kafka "
        "transaction, no offsets record).",
        f"Machine load average after: {load_after} (1 / 5 / 15 min). The machine's 2 cores "
        "are shared with other work: figures are lower and noisier than on a quiet machine.",
    ]
    report.publish("cdc", "Change data capture from PostgreSQL, with Debezium side by side "
                   "(bench/cdc.py)", env, body, notes, args.write_md, args.md_file)


def _debezium_version() -> str:
    for jar in jvm.jars("debezium"):
        if jar.name.startswith("debezium-connector-postgres-"):
            return jar.name.removeprefix("debezium-connector-postgres-").removesuffix(".jar")
    return "?"


if __name__ == "__main__":
    main()
