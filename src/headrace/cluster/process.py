"""One server process of a cluster (a Kafka node, a Spark master or worker), its output in
a log file.

The output goes to a file, not a pipe, so a process can outlive the Python process that
started it (``headrace cluster up`` returns while the cluster runs) and another process
can later stop it by its pid (``headrace cluster down``). Readiness is a marker line in
that file. Linux only: a pid read back from a state file is checked against the process's
command line (``/proc``), so a pid reused by an unrelated process is never signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from headrace.cluster.errors import ClusterError
from headrace.testing import scaled


class NodeProcess:
    """``cmd`` run with its stdout and stderr appended to ``log``. ``tag`` is an argument
    of ``cmd`` unique to this node (its properties file, its work directory): it is how a
    pid is recognised as this node's. Not thread-safe."""

    def __init__(self, name: str, cmd: Sequence[str], log: Path, tag: str,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.cmd = list(cmd)
        self.log = log
        self.tag = tag
        self.env = dict(env) if env is not None else None
        self.pid = 0
        self._popen: subprocess.Popen[bytes] | None = None
        self._log_start = 0  # where this incarnation's output begins in ``log``

    def start(self, detach: bool = False) -> None:
        """Launch the process (returns at once; see ``wait_ready``). ``detach``: in a
        session of its own, so it outlives this process and its terminal's signals;
        otherwise it is killed when the thread that started it ends."""
        if self.alive():
            raise ClusterError(f"{self.name} is already running (pid {self.pid})")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_start = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self._popen = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=self.env,
                                           start_new_session=detach,
                                           preexec_fn=None if detach else _die_with_parent)
        self.pid = self._popen.pid

    def adopt(self, pid: int) -> None:
        """Take over a process started by another Python process (from a state file)."""
        self._popen = None
        self.pid = pid

    def alive(self) -> bool:
        """True while the process runs (a zombie child counts as dead)."""
        if not self.pid:
            return False
        if self._popen is not None:
            return self._popen.poll() is None
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        state = stat.rsplit(")", 1)[-1].split()[0]
        return self.tag.encode() in cmdline and state != "Z"

    def output(self) -> str:
        """This incarnation's output so far."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self._log_start)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, marker: str, timeout: float) -> str:
        """Block until a line of this incarnation's output contains ``marker``; return
        that line. ``ClusterError`` (with the output's tail) if the process exits first
        or ``timeout`` (scaled) passes, in which case the process is killed."""
        deadline = time.monotonic() + scaled(timeout)
        while True:
            text = self.output()
            for line in text.splitlines():
                if marker in line:
                    return line
            if not self.alive():
                raise ClusterError(f"{self.name} exited during start-up:\n{text[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise ClusterError(f"{self.name} did not start within {scaled(timeout):g} s:"
                                   f"\n{text[-3000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: no flush, no clean shutdown. Returns once the process is gone."""
        self._signal(signal.SIGKILL)
        self._wait_gone(scaled(10))

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after ``timeout`` (scaled). Idempotent."""
        self._signal(signal.SIGTERM)
        if not self._wait_gone(scaled(timeout)):
            self.kill()

    def _signal(self, sig: signal.Signals) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def _wait_gone(self, timeout: float) -> bool:
        if self._popen is not None:
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True


def _die_with_parent() -> None:
    """In the child before ``exec``: SIGKILL this process when the thread that started it
    ends (Linux ``PR_SET_PDEATHSIG``), so a test run killed by its timeout leaves no JVM
    behind. Detached processes (``headrace cluster up``) are meant to outlive it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1
