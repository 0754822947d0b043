"""What security costs on headrace's broker: produce/consume throughput over SASL_SSL
(SCRAM-SHA-512 over TLS) and SSL against PLAINTEXT, and the connection set-up rate with
SCRAM, in one run on one broker.

Usage::

    .venv/bin/python bench/security.py                 # 3 rounds, 100 B and 1 KiB records
    .venv/bin/python bench/security.py --quick         # smoke run (10x fewer records)
    .venv/bin/python bench/security.py --write-md      # also refresh BENCHMARKS.md

One broker serves four listeners (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) with a
throwaway CA. Throughput: per record size, each protocol in turn (round-robin, ``--rounds``
times, a fresh topic each) with librdkafka tuned as ``bench/throughput.py`` (acks=all,
linger 5 ms, 1 MB batches, one partition); the median round per cell, the ratio against
PLAINTEXT of the same round set. Connections: ``--connections`` sequential connections per
protocol from a bare socket (TCP, TLS handshake where used, ApiVersions, SaslHandshake and
the SCRAM exchange where used, one Metadata request, close), with the broker's CPU time per
connection from /proc (the client's PBKDF2 is the client's cost, not counted there).
"""

from __future__ import annotations

import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kafka.net.sasl.scram import ScramClient
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)

from clients import Phase, consume, cpu_seconds, frame, produce
from report import arguments, fmt_float, fmt_int, fmt_ratio, publish, show_environment, table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.tls_support import make_pki

from headrace.testing import EmbeddedBroker

USER, PASSWORD = "bench", "bench-secret"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
RECORDS = {100: 1_000_000, 1024: 300_000}


def client_settings(protocol: str, ca: Path) -> dict[str, object]:
    settings: dict[str, object] = {"security.protocol": protocol}
    if protocol.startswith("SASL"):
        settings |= {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                     "sasl.password": PASSWORD}
    if protocol.endswith("SSL"):
        settings["ssl.ca.location"] = str(ca)
    return settings


def _read(sock: socket.socket | ssl.SSLSocket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return buf
    return exactly(int.from_bytes(exactly(4), "big"))


def one_connection(address: str, protocol: str, context: ssl.SSLContext) -> None:
    """Open, authenticate as a client would, ask Metadata, close."""
    host, port = address.rsplit(":", 1)
    sock: socket.socket | ssl.SSLSocket = socket.create_connection((host, int(port)), 10)
    try:
        if protocol.endswith("SSL"):
            sock = context.wrap_socket(sock, server_hostname=host)
        sock.sendall(frame(ApiVersionsRequest(), 0, 1))
        _read(sock)
        if protocol.startswith("SASL"):
            scram = ScramClient(USER, PASSWORD, "SCRAM-SHA-512")
            sock.sendall(frame(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1, 2))
            _read(sock)
            first = SaslAuthenticateRequest(auth_bytes=scram.first_message())
            sock.sendall(frame(first, 2, 3))
            server_first = _auth_bytes(_read(sock))
            scram.process_server_first_message(server_first)
            sock.sendall(frame(SaslAuthenticateRequest(auth_bytes=scram.final_message()), 2, 4))
            scram.process_server_final_message(_auth_bytes(_read(sock)))
        sock.sendall(frame(MetadataRequest(topics=[]), 1, 5))
        _read(sock)
    finally:
        sock.close()


def _auth_bytes(frame: bytes) -> bytes:
    """The auth_bytes of a SaslAuthenticate v2 response frame (after the size)."""
    r = SaslAuthenticateResponse.decode(frame[5:], version=2)  # correlation id + tag byte
    if r.error_code:
        raise RuntimeError(f"login failed: {r.error_message}")
    return bytes(r.auth_bytes)


def connection_rate(address: str, protocol: str, count: int, context: ssl.SSLContext,
                    broker_cpu: Callable[[], float]) -> tuple[float, float]:
    """(connections/s, broker CPU ms per connection)."""
    one_connection(address, protocol, context)  # warm
    cpu0 = broker_cpu()
    start = time.perf_counter()
    for _ in range(count):
        one_connection(address, protocol, context)
    elapsed = time.perf_counter() - start
    return count / elapsed, (broker_cpu() - cpu0) * 1000 / count


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, "security")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    scale = 10 if args.quick else 1
    env = show_environment()
    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp))
        listeners = [arg for p in PROTOCOLS for arg in ("--listener", f"{p}://127.0.0.1:0")]
        with EmbeddedBroker(extra_args=[*listeners, "--ssl-keystore-location",
                                        str(pki.server)]) as broker:
            added = subprocess.run(
                [sys.executable, "-m", "headrace", "users", "add", USER, "--mechanism",
                 "SCRAM-SHA-512", "-b", broker.bootstrap_servers], capture_output=True,
                text=True, env={**os.environ, "HEADRACE_USER_PASSWORD": PASSWORD}, timeout=60)
            if added.returncode:
                raise SystemExit(added.stderr)
            addresses = {**broker.listeners, "PLAINTEXT": broker.bootstrap_servers}
            cpu = cpu_seconds(broker.pid)
            phases: dict[tuple[int, str], list[tuple[Phase, Phase]]] = {}
            for round_ in range(args.rounds):
                for size, records in RECORDS.items():
                    for protocol in PROTOCOLS:
                        topic = f"sec-{size}-{protocol.lower()}-{round_}"
                        address = addresses[protocol]
                        settings = client_settings(protocol, pki.ca)
                        p = produce(address, topic, records // scale, size, 1, broker_cpu=cpu,
                                    overrides=settings)
                        c = consume(address, topic, records // scale, 1, broker_cpu=cpu,
                                    overrides=settings)
                        phases.setdefault((size, protocol), []).append((p, c))
                        print(f"round {round_ + 1} {size} B {protocol}: produce "
                              f"{p.records_per_s:,.0f}/s consume {c.records_per_s:,.0f}/s",
                              file=sys.stderr)
            context = ssl.create_default_context(cafile=str(pki.ca))
            rates = {p: connection_rate(addresses[p], p, args.connections // scale,
                                        context, cpu) for p in PROTOCOLS}
    rows = []
    for (size, protocol), runs in phases.items():
        prod = statistics.median(p.records_per_s for p, _c in runs)
        cons = statistics.median(c.records_per_s for _p, c in runs)
        base = phases[(size, "PLAINTEXT")]
        bprod = statistics.median(p.records_per_s for p, _c in base)
        bcons = statistics.median(c.records_per_s for _p, c in base)
        cpu_per_m = statistics.median((p.broker_cpu_s + c.broker_cpu_s) / p.records * 1e6
                                      for p, c in runs)
        rows.append([f"{size} B", protocol, fmt_int(prod), fmt_ratio(prod, bprod),
                     fmt_int(cons), fmt_ratio(cons, bcons), fmt_float(cpu_per_m, 2)])
    body = table(["records", "protocol", "produce rec/s", "vs PLAINTEXT", "consume rec/s",
                  "vs PLAINTEXT", "broker CPU s / M records"], rows)
    conn_rows = [[p, fmt_int(rate), fmt_float(cpu_ms, 2)] for p, (rate, cpu_ms) in rates.items()]
    body += "\n\nConnection set-up (sequential, one client):\n\n" + table(
        ["protocol", "connections/s", "broker CPU ms / connection"], conn_rows)
    notes = [
        f"command: `.venv/bin/python bench/security.py{' --quick' if args.quick else ''}`, "
        f"{args.rounds} rounds, median per cell; one partition, acks=all",
        "SASL: SCRAM-SHA-512 (8192 iterations); TLS: a P-256 ECDSA certificate, TLS 1.3 "
        "as negotiated by librdkafka and Python's ssl",
        "a connection: TCP (+ TLS handshake) + ApiVersions (+ SaslHandshake + two "
        "SaslAuthenticate round trips) + Metadata + close; the client's PBKDF2 (8192 "
        "iterations of SHA-512) bounds connections/s, the broker's share is its CPU column",
    ]
    publish("security", "Security: TLS and SASL cost (bench/security.py)", env, body, notes,
            args.write_md, args.md_file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
