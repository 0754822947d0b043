"""``headrace savepoint create|inspect`` through the command line: a savepoint writer
killed with SIGKILL while it writes leaves the savepoint absent, never half there; what
inspect shows; the one-line errors."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headrace.testing import scaled
from tests.savepoints.corpus_cases import CORPUS, PLACEHOLDER, relocate

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "headrace", "savepoint", *args]


def test_kill_9_while_writing_leaves_no_savepoint_and_inspect(
        tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(CORPUS / "windowed-columnar" / "checkpoint", checkpoint)
    relocate(checkpoint, PLACEHOLDER, str(checkpoint))
    out = tmp_path / "sp"
    writer = subprocess.Popen(_cli("create", str(checkpoint), str(out)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)
    caught = False
    try:
        deadline = time.monotonic() + scaled(180)
        # the moment the state is being written: the partial folder has its operators'
        while time.monotonic() < deadline and writer.poll() is None:
            if any(p.is_dir() for p in tmp_path.glob(".sp.partial-*/operators")):
                os.killpg(writer.pid, signal.SIGKILL)
                caught = True
                break
            time.sleep(0.005)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(writer.pid, signal.SIGKILL)  # the writer's JVM too
        writer.wait(scaled(30))
    assert caught, f"the writer finished before it could be killed: {writer.returncode}"
    assert not out.exists()
    assert list(tmp_path.glob(".sp.partial-*"))  # what was left is not the savepoint

    # the corpus's savepoint of the same checkpoint stands for a completed one (a
    # second writer would start another JVM; test_savepoints writes them in-process)
    out = CORPUS / "windowed-columnar" / "savepoint"
    shown = subprocess.run(_cli("inspect", str(out)), capture_output=True, text=True,
                           timeout=scaled(60))
    assert shown.returncode == 0, shown.stderr
    assert "windowed.columnar" in shown.stdout and "corpus-windowed-columnar" in shown.stdout
    keys = subprocess.run(_cli("inspect", str(out), "--operator", "0"), capture_output=True,
                          text=True, timeout=scaled(60))
    assert keys.returncode == 0, keys.stderr
    assert sorted(line.split(":")[0] for line in keys.stdout.splitlines()) == [
        "('k0',)", "('k1',)", "('k2',)"]
    again = subprocess.run(_cli("create", str(checkpoint), str(out)), capture_output=True,
                           text=True, timeout=scaled(240))
    assert again.returncode == 1
    assert again.stderr.strip().endswith("exists; a savepoint is written to a new folder")
    missing = subprocess.run(_cli("inspect", str(tmp_path)), capture_output=True, text=True,
                             timeout=scaled(60))
    assert missing.returncode == 1 and "is not a savepoint" in missing.stderr


def test_inspect_shows_the_real_time_operators_state_per_card() -> None:
    out = CORPUS / "realtime-rules" / "savepoint"
    shown = subprocess.run(_cli("inspect", str(out), "--operator", "0", "--limit", "1"),
                           capture_output=True, text=True, timeout=scaled(60))
    assert shown.returncode == 0, shown.stderr
    (line,) = shown.stdout.splitlines()
    assert line.startswith("'c1': {'recent': [{'t': 1699999201000, 'id': 't0-1', 'lat': 48.85, "
                           "'lon': 2.35, 'amount': 21.0, '__where_card_testing': False}, ")
    assert "'fired': {'impossible_travel': " in line
