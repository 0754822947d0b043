"""``headrace demo fraud`` as a user runs it (what ``make demo`` runs): the real-time path by
default, checked by the micro-batch pipeline in a Spark application of its own, every
incident found, and a quiet terminal —
Spark, the JVM and the Python workers write to the log file the demo names, not to it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from headrace.pipelines.fraud.realtime import checkpoint_interval_ms
from headrace.realtime import RealtimeError
from headrace.testing import scaled

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NOISE = re.compile(r"ERROR|WARN|Exception|Traceback|Python worker|log4j|%\d\|")


def test_demo_fraud_real_time_by_default_checked_and_quiet() -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, COLUMNS="120")
    done = subprocess.run([sys.executable, "-m", "headrace", "demo", "fraud", "--rate", "100",
                           "--duration", "20"], capture_output=True, text=True, env=env,
                          timeout=scaled(600), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "fraud demo (realtime)" in out
    assert "precision 1.000  recall 1.000" in out, out
    match = re.search(r"checked by the micro-batch path: (\d+) alerts in both, (\d+) "
                      r"real-time only, (\d+) micro-batch only", out)
    assert match, out
    assert int(match.group(1)) > 0 and match.group(2, 3) == ("0", "0"), out
    assert re.search(r"detection latency p50 \d+ ms  p99 \d+ ms", out)
    assert re.search(r"by stage, p50 / p99: event -> record", out), out
    # the cold path (the first seconds at the run's rate, the operator's first alerts, each
    # sink task's first send and transaction) is paid before the measured traffic, by
    # traffic and alerts on cards outside the run, which are in none of the run's figures;
    # the filler traffic raises no alert (exactly the 6 warm-up alerts below)
    assert "warming up the real-time path: 10 s of payments and 6 alerts on cards outside " \
        "the run" in done.stderr, done.stderr[-3000:]
    assert re.search(r"warm-up before the measured traffic: 6 alerts on cards outside the "
                     r"run, \d+-\d+ ms \(in none of the figures above\)", out), out
    # the real-time path's session runs nothing else: a micro-batch query beside it held
    # task slots at checkpoint boundaries, where a Real-Time Mode batch needs all of its
    # own free at once (CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT killed the demo)
    assert "the check (micro-batch pipeline) in a Spark application of its own at nice" \
        in done.stderr, done.stderr[-3000:]
    # the run's own micro-batch checkpoint (the check's state) is gone; its logs are kept
    log = re.search(r"its log: (\S+)/spark-check\.log", done.stderr)
    assert log, done.stderr[-3000:]
    assert os.path.isfile(f"{log.group(1)}/spark.log")
    assert not os.path.exists(f"{log.group(1)}/microbatch")
    noisy = [ln for ln in (out + done.stderr).splitlines() if NOISE.search(ln)]
    assert not noisy, noisy


def test_a_bad_checkpoint_interval_is_one_line_before_anything_starts() -> None:
    done = subprocess.run([sys.executable, "-m", "headrace", "demo", "fraud",
                           "--checkpoint-interval", "2s"], capture_output=True, text=True,
                          env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
                          timeout=scaled(120), check=False)
    assert done.returncode == 1
    assert "checkpoint interval '2s' is shorter than Real-Time Mode's shortest batch, 5 " \
        "seconds" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "embedded broker" not in done.stdout + done.stderr
    with pytest.raises(RealtimeError, match="checkpoint interval: not a duration: 'soon'"):
        checkpoint_interval_ms("soon")
    assert checkpoint_interval_ms("5 minutes") == 300_000
