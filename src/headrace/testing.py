"""Public test helpers: ``EmbeddedBroker`` runs a real broker process for tests and notebooks.

The broker is a separate process (``python -m headrace broker``), so tests talk to it over
TCP exactly as clients would, and can ``kill -9`` and restart it on the same data.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from types import TracebackType

from headrace.errors import HeadraceError

READY_PREFIX = "headrace broker listening on "


class EmbeddedBrokerError(HeadraceError):
    """The embedded broker did not start or stop as expected."""


class EmbeddedBroker:
    """A broker subprocess on a free port with its own data directory.

    ``with EmbeddedBroker() as b: ... b.bootstrap_servers``. The data directory is a
    fresh temporary one (removed on exit) unless ``data_dir`` is given. ``extra_args``
    are passed to ``headrace broker`` (e.g. ``["--fsync"]``). ``kill()`` sends SIGKILL;
    ``start()`` again restarts on the same port and data (recovery runs).
    """

    def __init__(self, data_dir: str | Path | None = None, extra_args: list[str] | None = None,
                 host: str = "127.0.0.1", start_timeout: float = 30.0) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="headrace-"))
        self.extra_args = list(extra_args or [])
        self.host = host
        self.port = 0
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)

    @property
    def bootstrap_servers(self) -> str:
        if not self.port:
            raise EmbeddedBrokerError("broker not started")
        return f"{self.host}:{self.port}"

    def start(self) -> EmbeddedBroker:
        """Start the process and wait until it accepts connections. Blocks."""
        if self.process is not None and self.process.poll() is None:
            raise EmbeddedBrokerError("broker already running")
        cmd = [sys.executable, "-m", "headrace", "broker", "--host", self.host,
               "--port", str(self.port), "--data-dir", str(self.data_dir), *self.extra_args]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env)
        assert self.process.stdout is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            line = self.process.stdout.readline()
            if not line:
                self.process.wait()
                raise EmbeddedBrokerError("broker exited during start-up:\n" + "".join(self.output))
            self.output.append(line)
            if line.startswith(READY_PREFIX):
                self.port = int(line.strip().rsplit(":", 1)[1])
                break
            if time.monotonic() > deadline:
                self.kill()
                raise EmbeddedBrokerError("broker did not start in time:\n" + "".join(self.output))
        threading.Thread(target=self._drain, args=(self.process,), daemon=True).start()
        return self

    def _drain(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.output.append(line)

    def stop(self, timeout: float = 15.0) -> int:
        """Stop cleanly (SIGTERM) and return the exit code; SIGKILL after ``timeout``."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else 0
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def kill(self) -> None:
        """SIGKILL the broker: no flush, no clean-shutdown marker."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> EmbeddedBroker:
        self.stop()
        return self.start()

    @property
    def pid(self) -> int:
        if self.process is None:
            raise EmbeddedBrokerError("broker not started")
        return self.process.pid

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
