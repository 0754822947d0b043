"""Change data capture from MariaDB, end to end: a pgbench-style write load captured by
``headrace cdc mysql`` into a broker, then the same load captured by Debezium's MariaDB
connector in its embedded engine (``jvm/debezium-mariadb``), on the same machine and server.

Usage::

    .venv/bin/python bench/cdc_mysql.py                     # 4 writer threads, 20 s each
    .venv/bin/python bench/cdc_mysql.py --writers 8 --seconds 60 --no-debezium

Starts a throwaway MariaDB (row binlog), a headrace broker and the connector process,
creates pgbench's tables (accounts, tellers, branches, history; ``--accounts`` accounts),
snapshots them, then runs pgbench's TPC-B-like transaction (three updates and an insert)
from ``--writers`` threads for ``--seconds``. headrace: a read_committed consumer follows
the four topics. Debezium: its engine prints each event as it hands it over (it writes to
no broker, so it does less work than headrace: no Kafka transaction). Reported per side:
change events/s captured (from the load's start until every change is out) and the
latency of the history inserts (from ``NOW(3)`` in the inserting transaction, just before
its commit, to the event being readable; the binlog's own timestamps have whole seconds).
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
from pathlib import Path

import pymysql
from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.cdc.mysql_support import MySqlConnectorProcess, execute, query

import report
from headrace import jvm
from headrace.testing import EmbeddedBroker, MariaDBServer

TABLES = ("accounts", "tellers", "branches", "history")


def _schema(db: MariaDBServer, accounts: int) -> None:
    execute(db, "CREATE DATABASE bench",
            "CREATE TABLE bench.branches (bid int PRIMARY KEY, bbalance int)",
            "CREATE TABLE bench.tellers (tid int PRIMARY KEY, bid int, tbalance int)",
            "CREATE TABLE bench.accounts (aid int PRIMARY KEY, bid int, abalance int, "
            "filler char(84))",
            "CREATE TABLE bench.history (hid bigint AUTO_INCREMENT PRIMARY KEY, tid int, "
            "bid int, aid int, delta int, mtime datetime(3))",
            "INSERT INTO bench.branches SELECT seq, 0 FROM seq_1_to_10",
            "INSERT INTO bench.tellers SELECT seq, 1 + seq % 10, 0 FROM seq_1_to_100",
            f"INSERT INTO bench.accounts SELECT seq, 1 + seq % 10, 0, '' FROM "
            f"seq_1_to_{accounts}")


def _writer(db: MariaDBServer, accounts: int, stop: threading.Event, counts: list[int]) -> None:
    rng = random.Random()
    conn = pymysql.connect(host=db.host, port=db.port, user="root", database="bench",
                           init_command="SET time_zone = '+00:00'")
    with conn.cursor() as cur:
        while not stop.is_set():
            aid, tid, bid = rng.randint(1, accounts), rng.randint(1, 100), rng.randint(1, 10)
            # never 0: MySQL logs no row for an UPDATE that changes nothing
            delta = rng.choice((-1, 1)) * rng.randint(1, 5000)
            cur.execute("UPDATE accounts SET abalance = abalance + %s WHERE aid = %s",
                        (delta, aid))
            cur.execute("UPDATE tellers SET tbalance = tbalance + %s WHERE tid = %s",
                        (delta, tid))
            cur.execute("UPDATE branches SET bbalance = bbalance + %s WHERE bid = %s",
                        (delta, bid))
            cur.execute("INSERT INTO history (tid, bid, aid, delta, mtime) VALUES "
                        "(%s, %s, %s, %s, NOW(3))", (tid, bid, aid, delta))
            conn.commit()
            counts.append(1)
    conn.close()


class Load:
    """``writers`` threads running the transaction until ``stop``."""

    def __init__(self, db: MariaDBServer, accounts: int, writers: int) -> None:
        self.stop = threading.Event()
        self.counts: list[int] = []
        self.threads = [threading.Thread(target=_writer, args=(db, accounts, self.stop,
                                                                self.counts))
                        for _ in range(writers)]
        self.start = time.monotonic()
        for t in self.threads:
            t.start()

    def finish(self) -> tuple[int, float]:
        self.stop.set()
        for t in self.threads:
            t.join()
        return len(self.counts), time.monotonic() - self.start


def _latency(doc: dict[str, object], now_ms: float) -> float | None:
    source = doc.get("source")
    after = doc.get("after")
    if isinstance(source, dict) and source.get("table") == "history" and \
            isinstance(after, dict) and isinstance(after.get("mtime"), int):
        return now_ms - float(after["mtime"])  # type: ignore[arg-type]
    return None


def _report(side: str, committed: int, elapsed: float, events: int, drained: float,
            latencies: list[float]) -> None:
    latencies.sort()
    print(f"{side}: {committed:,} transactions in {elapsed:.1f} s = {committed / elapsed:,.0f} "
          f"tx/s; {events:,} change events captured in {drained:.1f} s = "
          f"{events / drained:,.0f} events/s")
    if latencies:
        print(f"{side}: commit-to-readable latency (history inserts during the load): p50 "
              f"{latencies[len(latencies) // 2]:.0f} ms, p99 "
              f"{latencies[int(len(latencies) * 0.99)]:.0f} ms ({len(latencies):,} events)")


def _headrace(db: MariaDBServer, broker: EmbeddedBroker, args: argparse.Namespace) -> None:
    names = ",".join(f"bench.{t}" for t in TABLES)
    t0 = time.monotonic()
    connector = MySqlConnectorProcess(db.dsn, names, broker.bootstrap_servers, "bench").start()
    snapshot_s = time.monotonic() - t0
    print(f"headrace: snapshot of {args.accounts + 110:,} rows in {snapshot_s:.1f} s (process "
          f"start included)")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "b",
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 5})
    ends = []
    for t in TABLES:  # start exactly after the snapshot
        _low, high = consumer.get_watermark_offsets(TopicPartition(f"bench.bench.{t}", 0))
        ends.append(TopicPartition(f"bench.bench.{t}", 0, high))
    consumer.assign(ends)
    latencies: list[float] = []
    load = Load(db, args.accounts, args.writers)
    events = 0
    committed, elapsed = 0, 0.0
    deadline = load.start + args.seconds + 120
    while time.monotonic() < deadline:
        if committed == 0 and time.monotonic() - load.start >= args.seconds:
            committed, elapsed = load.finish()
        if committed and events >= committed * 4:
            break
        for msg in report.receive(consumer, 1000, 0.05):
            if msg.error() or msg.value() is None:
                continue
            latency = _latency(json.loads(msg.value()), time.time() * 1000)
            if latency is not None and not load.stop.is_set():
                latencies.append(latency)
            events += 1
    drained = time.monotonic() - load.start
    connector.stop()
    consumer.close()
    _report("headrace", committed, elapsed, events, drained, latencies)


def _debezium(db: MariaDBServer, args: argparse.Namespace) -> None:
    names = ",".join(f"bench.{t}" for t in TABLES)
    process = subprocess.Popen(
        [jvm.java_executable(), "-cp", jvm.classpath("debezium-mariadb"),
         "io.headrace.debezium.DebeziumMariaDbCapture", db.host, str(db.port), "root", "bench",
         "dbz", names, "5403"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None and process.stdin is not None
    snapshot_rows = sum(int(query(db, f"SELECT COUNT(*) FROM bench.{t}")[0][0]) for t in TABLES)
    t0 = time.monotonic()
    for seen, _line in enumerate(process.stdout, 1):
        if seen == snapshot_rows:
            break
    print(f"debezium: snapshot of {snapshot_rows:,} rows in {time.monotonic() - t0:.1f} s "
          "(JVM start included)")
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append((time.time() * 1000, line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    load = Load(db, args.accounts, args.writers)
    time.sleep(args.seconds)
    committed, elapsed = load.finish()
    deadline = time.monotonic() + 120
    while len(lines) < committed * 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    drained = time.monotonic() - load.start
    stop_ms = (time.time() - (drained - elapsed)) * 1000
    latencies = []
    for at, line in lines:
        latency = _latency(json.loads(line.split("\t", 2)[2]), at)
        if latency is not None and at <= stop_ms:
            latencies.append(latency)
    process.stdin.close()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    _report("debezium", committed, elapsed, len(lines), drained, latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--accounts", type=int, default=100_000)
    parser.add_argument("--no-debezium", action="store_true")
    args = parser.parse_args()
    with MariaDBServer() as db, EmbeddedBroker() as broker:
        _schema(db, args.accounts)
        _headrace(db, broker, args)
        if not args.no_debezium:
            _debezium(db, args)
    print(f"machine load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
