"""``EmbeddedBroker``: a real headrace broker process for tests and notebooks.

The broker is a separate process (``python -m headrace broker``), so tests talk to it over
TCP exactly as clients would, and can ``kill -9`` and restart it on the same data.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from pathlib import Path
from types import TracebackType

from headrace.testing.process import (
    EmbeddedBrokerError,
    ServerProcess,
)

READY_PREFIX = "headrace broker listening on "
METRICS_PREFIX = "headrace broker metrics on "
LISTENER_PREFIX = "headrace broker listener "


class EmbeddedBroker(ServerProcess):
    """A broker subprocess on a free port with its own data directory.

    ``with EmbeddedBroker() as b: ... b.bootstrap_servers``. The data directory is a
    fresh temporary one (removed on exit) unless ``data_dir`` is given. ``extra_args``
    are passed to ``headrace broker`` (e.g. ``["--fsync"]``); ``launcher`` replaces
    ``python -m headrace`` (fault-injection tests). ``kill()`` sends SIGKILL;
    ``start()`` again restarts on the same port and data (recovery runs).
    """

    def __init__(self, data_dir: str | Path | None = None, extra_args: list[str] | None = None,
                 host: str = "127.0.0.1", start_timeout: float = 30.0,
                 launcher: list[str] | None = None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="headrace-"))
        self.extra_args = list(extra_args or [])
        self.metrics_url: str | None = None  # with "--metrics-port": the scrape URL
        # with "--listener"s: listener name -> HOST:PORT, for each but the first
        self.listeners: dict[str, str] = {}
        # the command that runs headrace's CLI; tests substitute one with a fault hook
        self.launcher = list(launcher or [sys.executable, "-m", "headrace"])
        # extra environment variables of the process (fault injection), set before start()
        self.env: dict[str, str] = {}
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
        cmd = [*self.launcher, "broker", "--host", self.host,
               "--port", str(self.port), "--data-dir", str(self.data_dir), *self.extra_args]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env)
        line = self._wait_ready(READY_PREFIX, self.start_timeout, "broker")
        self.port = int(line.strip().rsplit(":", 1)[1])
        lines = self.output_lines()
        # the last one: after a restart the kept output still holds the previous run's
        self.metrics_url = next((ln.strip().rsplit(" ", 1)[1] for ln in reversed(lines)
                                 if ln.startswith(METRICS_PREFIX)), None)
        self.listeners = {ln.split()[3]: ln.strip().rsplit(" ", 1)[1] for ln in lines
                          if ln.startswith(LISTENER_PREFIX)}
        return self

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
