"""Change data capture throughput and latency: a pgbench-style write load on PostgreSQL,
captured by ``headrace cdc postgres`` into a broker.

Usage::

    .venv/bin/python bench/cdc.py                     # 4 writer threads, 20 s
    .venv/bin/python bench/cdc.py --writers 8 --seconds 60

Starts a throwaway PostgreSQL (wal_level=logical), a headrace broker and the connector
process (separate processes), creates pgbench's tables (accounts, tellers, branches,
history; 100k accounts), snapshots them, then runs pgbench's TPC-B-like transaction (three
updates and an insert) from ``--writers`` threads. A read_committed consumer follows the
four topics; per change event, latency is the time it becomes readable minus its commit
time in PostgreSQL (``source.ts_ms``). Reported: transactions/s committed, change events/s
captured, latency p50/p99, and the snapshot rate.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

import psycopg2
from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.cdc.support import ConnectorProcess, execute

from headrace.testing import EmbeddedBroker, PostgresServer

TABLES = ("accounts", "tellers", "branches", "history")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--accounts", type=int, default=100_000)
    args = parser.parse_args()
    with PostgresServer() as pg, EmbeddedBroker() as broker:
        _schema(pg.dsn, args.accounts)
        names = ",".join(f"public.{t}" for t in TABLES)
        t0 = time.monotonic()
        connector = ConnectorProcess(pg.dsn, names, broker.bootstrap_servers, "bench").start()
        snapshot_s = time.monotonic() - t0
        snapshot_rows = args.accounts + 110
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "b",
                             "isolation.level": "read_committed", "fetch.wait.max.ms": 5})
        ends = []
        for t in TABLES:  # start exactly after the snapshot
            _low, high = consumer.get_watermark_offsets(TopicPartition(f"bench.public.{t}", 0))
            ends.append(TopicPartition(f"bench.public.{t}", 0, high))
        consumer.assign(ends)
        latencies: list[float] = []
        stop = threading.Event()
        counts: list[int] = []
        writers = [threading.Thread(target=_writer, args=(pg.dsn, args.accounts, stop, counts))
                   for _ in range(args.writers)]
        start = time.monotonic()
        for w in writers:
            w.start()
        events = 0
        while time.monotonic() - start < args.seconds:
            for msg in consumer.consume(1000, timeout=0.05):
                if msg.error() or msg.value() is None:
                    continue
                doc = json.loads(msg.value())
                latencies.append(time.time() * 1000 - doc["source"]["ts_ms"])
                events += 1
        stop.set()
        for w in writers:
            w.join()
        elapsed = time.monotonic() - start
        committed = len(counts)
        deadline = time.monotonic() + 60
        while events < committed * 4 and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.2):
                if not msg.error() and msg.value() is not None:
                    events += 1
        drained = time.monotonic() - start
        connector.stop()
        consumer.close()
    latencies.sort()
    print(f"snapshot: {snapshot_rows:,} rows in {snapshot_s:.1f} s (process start included), "
          f"{snapshot_rows / snapshot_s:,.0f} rows/s")
    print(f"load: {args.writers} writers, {committed:,} transactions in {elapsed:.1f} s = "
          f"{committed / elapsed:,.0f} tx/s ({committed * 4:,} row changes)")
    print(f"captured: {events:,} change events, all in {drained:.1f} s = "
          f"{events / drained:,.0f} events/s")
    if latencies:
        print(f"commit-to-readable latency (events read during the load): p50 "
              f"{latencies[len(latencies) // 2]:.0f} ms, p99 "
              f"{latencies[int(len(latencies) * 0.99)]:.0f} ms ({len(latencies):,} events)")
    print(f"machine load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
