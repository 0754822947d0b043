"""The headrace broker's CPU per Produce and per Fetch request, under a fixed synthetic load.

Throughput figures on a shared 2-core machine swing by tens of percent with the load of
other work; the broker's own CPU time per request hardly does. This script sends the same
pre-encoded requests every time, from a bare socket (so the client costs almost nothing),
and reads the broker's user and system CPU time from /proc before and after:

- produce: ``--requests`` Produce v8 requests (acks=1), each one batch of ``--batch``
  records of ``--size`` bytes (what a Java producer with batch.size=16384 sends: 16 x 1 KiB
  or ~150 x 100 B), ``--in-flight`` at a time as the Java producer pipelines them;
- fetch: as many Fetch v11 requests, one after the other, each from the next batch's offset
  with partition_max_bytes = one batch (a consumer keeping up), then the same with 1 MiB.

    python bench/request_cpu.py [--requests 20000] [--size 1024] [--batch 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import sys
import time
from collections.abc import Sequence

import psutil  # type: ignore[import-untyped]
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from brokers import METRICS_SPEC, BrokerSpec, create_topic, running
from clients import frame

TOPIC = "request-cpu"
CLIENT_ID = "request-cpu"


def _batch(records: int, size: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 24)
    now = int(time.time() * 1000)
    for i in range(records):
        b.append(i, now, None, b"x" * size, [])
    return bytes(b.build())


def produce_frame(batch: bytes) -> bytes:
    tpd = ProduceRequest.TopicProduceData
    return frame(ProduceRequest(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[
        tpd(name=TOPIC, partition_data=[tpd.PartitionProduceData(index=0, records=batch)])]), 8,
        client_id=CLIENT_ID)


def fetch_frame(offset: int, max_bytes: int) -> bytes:
    ft = FetchRequest.FetchTopic
    return frame(FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=[ft(topic=TOPIC, partitions=[ft.FetchPartition(
            partition=0, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=max_bytes)])],
        forgotten_topics_data=[], rack_id=""), 11, client_id=CLIENT_ID)


class _Conn:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def read_frame(self) -> None:
        while True:
            if len(self.buf) >= 4:
                (size,) = struct.unpack_from(">i", self.buf)
                if len(self.buf) >= 4 + size:
                    del self.buf[: 4 + size]
                    return
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.buf += chunk


def cpu(pid: int) -> tuple[float, float]:
    t = psutil.Process(pid).cpu_times()
    return t.user, t.system


def pipelined(conn: _Conn, frames: Sequence[bytes], in_flight: int) -> None:
    sent = received = 0
    while received < len(frames):
        while sent < len(frames) and sent - received < in_flight:
            conn.sock.sendall(frames[sent])
            sent += 1
        conn.read_frame()
        received += 1


def run_once(args: argparse.Namespace, spec: BrokerSpec) -> dict[str, tuple[float, float]]:
    """One fresh broker: µs of broker CPU (user, system) per request, per phase."""
    out: dict[str, tuple[float, float]] = {}
    with running(spec) as broker:
        create_topic(broker.bootstrap_servers, TOPIC, 1)
        conn = _Conn(broker.bootstrap_servers)
        batch = _batch(args.batch, args.size)
        produce = produce_frame(batch)
        pipelined(conn, [produce] * 500, args.in_flight)  # warm-up
        u0, s0 = cpu(broker.pid)
        pipelined(conn, [produce] * args.requests, args.in_flight)
        u1, s1 = cpu(broker.pid)
        out["produce"] = ((u1 - u0) / args.requests * 1e6, (s1 - s0) / args.requests * 1e6)
        for name, max_bytes in (("fetch one batch", len(batch)), ("fetch 1 MiB", 1 << 20)):
            per = max(1, max_bytes // len(batch))
            span = (args.requests + 500 - per) * args.batch  # offsets with `per` batches after
            frames = [fetch_frame(i * per * args.batch % span, max_bytes)
                      for i in range(args.requests // min(per, 4))]
            u0, s0 = cpu(broker.pid)
            pipelined(conn, frames, 1)
            u1, s1 = cpu(broker.pid)
            out[name] = ((u1 - u0) / len(frames) * 1e6, (s1 - s0) / len(frames) * 1e6)
        conn.sock.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--size", type=int, default=1024, help="record value bytes")
    ap.add_argument("--batch", type=int, default=16, help="records per batch")
    ap.add_argument("--in-flight", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="fresh brokers; medians shown")
    ap.add_argument("--metrics", action="store_true",
                    help="also with --metrics-port (counting metrics), brokers alternating")
    args = ap.parse_args(argv)
    specs = [BrokerSpec("headrace")] + ([METRICS_SPEC] if args.metrics else [])
    runs: dict[str, list[dict[str, tuple[float, float]]]] = {s.name: [] for s in specs}
    for _ in range(args.repeat):
        for spec in specs:  # alternating, so both see the same machine
            runs[spec.name].append(run_once(args, spec))
    print(f"{args.requests:,} requests, batches of {args.batch} x {args.size} B, "
          f"median of {args.repeat} fresh brokers (min-max of user+sys)")
    medians: dict[str, dict[str, float]] = {}
    for name, results in runs.items():
        print(f" {name}")
        for phase in results[0]:
            user = statistics.median(r[phase][0] for r in results)
            sys_ = statistics.median(r[phase][1] for r in results)
            tot = [sum(r[phase]) for r in results]
            medians.setdefault(phase, {})[name] = user + sys_
            print(f"  {phase:16} broker CPU per request: {user + sys_:7.1f} µs "
                  f"(user {user:6.1f}, sys {sys_:6.1f}; {min(tot):.1f}-{max(tot):.1f})")
    if args.metrics:
        for phase, by in medians.items():
            base, metered = by[specs[0].name], by[METRICS_SPEC.name]
            print(f"  {phase:16} with metrics / without: {metered / base:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
