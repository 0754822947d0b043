"""bench/kafka_perf.py: its parsers on the tools' real output, and its --quick path end to end
against headrace (not timed: it checks the wiring and that numbers come out, not speed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from headrace import jvm
from headrace.testing import scaled

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import kafka_perf  # noqa: E402

PRODUCER_OUT = """\
100000 records sent, 49975.0 records/sec (4.77 MB/sec), 3.1 ms avg latency, 180.0 ms max latency.
1000000 records sent, 175994.4 records/sec (16.78 MB/sec), 8.21 ms avg latency, 210.00 ms max \
latency, 5 ms 50th, 20 ms 95th, 40 ms 99th, 150 ms 99.9th.
"""

CONSUMER_OUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-23 21:03:01:123, 2026-11-23 21:03:04:456, 95.3674, 28.6125, 1000000, 300030.0030, \
3012, 321, 297.0947, 3115264.7975
"""

LATENCY_OUT = """\
0\t3.21
1000\t0.52
Avg latency: 1.3070 ms
Percentiles: 50th = 0, 99th = 7, 99.9th = 29
"""


def test_parse_producer_takes_the_summary_line() -> None:
    assert kafka_perf.parse_producer(PRODUCER_OUT) == (1_000_000, 175994.4, 16.78)


def test_parse_consumer_takes_the_fetch_rates() -> None:
    assert kafka_perf.parse_consumer(CONSUMER_OUT) == (1_000_000, 3115264.7975, 297.0947)


def test_parse_latency() -> None:
    assert kafka_perf.parse_latency(LATENCY_OUT) == (1.307, 0.0, 7.0, 29.0)


def test_parsers_reject_output_without_a_summary() -> None:
    for parse in (kafka_perf.parse_producer, kafka_perf.parse_consumer, kafka_perf.parse_latency):
        with pytest.raises(ValueError):
            parse("Exception in thread main\n")


@pytest.mark.slow
@pytest.mark.skipif(not jvm.available("kafka"), reason="needs Java and jvm/lib/kafka")
def test_quick_run_against_headrace_prints_numbers(tmp_path: Path) -> None:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, str(BENCH / "kafka_perf.py"), "--quick", "--brokers", "headrace"],
        capture_output=True, text=True, timeout=scaled(180), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| 100 B")]
    assert len(rows) == 2  # one produce row, one consume row
    for row in rows:
        rate = row.split("|")[4 if "all" in row else 3].strip()
        assert float(rate.split()[0].replace(",", "")) > 0, row
    latency = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| headrace"))
    assert float(latency.split("|")[2].split()[0]) > 0, latency
