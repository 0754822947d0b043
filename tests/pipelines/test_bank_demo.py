"""``headrace demo bank`` as a user runs it: every check holds and the terminal is quiet."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from headrace.testing import scaled

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NOISE = re.compile(r"ERROR|WARN|Exception|Traceback|Python worker|log4j|%\d\|")


def test_demo_bank_checks_hold_and_it_is_quiet() -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, COLUMNS="160")
    done = subprocess.run([sys.executable, "-m", "headrace", "demo", "bank"],
                          capture_output=True, text=True, env=env, timeout=scaled(600), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    checks = [ln for ln in out.splitlines() if ln.startswith(("ok ", "FAILED"))]
    assert len(checks) == 5 and all(ln.startswith("ok ") for ln in checks), out
    assert "3 paid, 5 refused" in done.stderr
    assert re.search(r"balances \(projection rebuilt from offset 0\): alice 15\.00 EUR, "
                     r"bob 225\.00 EUR, carol 125\.00 EUR", done.stderr), done.stderr
    noisy = [ln for ln in (out + done.stderr).splitlines() if NOISE.search(ln)]
    assert not noisy, noisy
