"""Server subprocesses for tests: the one timeout knob (``scaled``), output kept for errors.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path

from headrace.errors import HeadraceError

TIMEOUT_SCALE_ENV = "HEADRACE_TEST_TIMEOUT_SCALE"


class EmbeddedBrokerError(HeadraceError):
    """The embedded broker did not start or stop as expected."""


def timeout_scale() -> float:
    """The factor every timeout of headrace's tests and test helpers is multiplied by:
    ``HEADRACE_TEST_TIMEOUT_SCALE`` (default 1; raise it on a slow or busy machine). A
    timeout is how long to wait for something that should happen, never how long a test
    is allowed to take to pass. Read on every call; an invalid value raises."""
    raw = os.environ.get(TIMEOUT_SCALE_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        scale = float(raw)
    except ValueError:
        scale = 0.0
    if not scale > 0:
        raise EmbeddedBrokerError(f"{TIMEOUT_SCALE_ENV} must be a positive number, not {raw!r}")
    return scale


def scaled(seconds: float) -> float:
    """``seconds`` times ``timeout_scale()``: the one way tests derive a timeout."""
    return seconds * timeout_scale()


class ServerProcess:
    """A server subprocess whose output is kept (the last 500 lines) for error messages."""

    process: subprocess.Popen[str] | None
    output: deque[str]
    _output_lock = threading.Lock()  # the drain thread appends while callers read

    def _drain(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with self._output_lock:
                self.output.append(line)

    def output_lines(self) -> list[str]:
        """A copy of the kept output lines, safe while the process still prints."""
        with self._output_lock:
            return list(self.output)

    def _wait_ready(self, marker: str, timeout: float, what: str) -> str:
        """Wait until a line of output contains ``marker``; return it. Blocks up to
        ``timeout`` (scaled) even when the process prints nothing at all (a server whose
        logging is misconfigured used to hang its caller in ``readline``); the output keeps
        being drained (and kept) afterwards."""
        process = self.process
        assert process is not None and process.stdout is not None
        stdout = process.stdout
        lines: queue.Queue[str | None] = queue.Queue()
        done = threading.Event()

        def pump() -> None:
            for line in stdout:
                with self._output_lock:
                    self.output.append(line)
                if not done.is_set():
                    lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + scaled(timeout)
        try:
            while True:
                try:
                    got = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    self.kill()
                    raise EmbeddedBrokerError(f"{what} did not start in time:\n"
                                              + "".join(self.output_lines())) from None
                if got is None:
                    process.wait()
                    raise EmbeddedBrokerError(f"{what} exited during start-up:\n"
                                              + "".join(self.output_lines()))
                if marker in got:
                    return got
        finally:
            done.set()

    def stop(self, timeout: float = 15.0) -> int:
        """Stop cleanly (SIGTERM) and return the exit code; SIGKILL after ``timeout``."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else 0
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def kill(self) -> None:
        """SIGKILL the process: no flush, no clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody uses now, from the ``PORTS_BELOW_EPHEMERAL`` ports under the kernel's
    ephemeral range. Outgoing connections take their local ports from that range, so a port
    picked there (``bind(0)``) could be some client's before the server bound it: a broker of
    a test cluster once died of "Address already in use" at start-up that way. Another
    server may still take the port first; a random pick makes two such pickers meet
    rarely."""
    low = _ephemeral_low()
    for _ in range(200):
        port = _PICK.randint(max(1024, low - PORTS_BELOW_EPHEMERAL), low - 1)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # that range is full: an ephemeral port, as before
        s.bind((host, 0))
        return int(s.getsockname()[1])


PORTS_BELOW_EPHEMERAL = 12_000
"""How many ports under the ephemeral range ``free_port`` picks from."""
_PICK = random.SystemRandom()
"""``free_port``'s own randomness: a test seeding ``random`` must not make two workers pick
the same ports."""


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when unreadable)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def client_args(settings: Mapping[str, str]) -> list[str]:
    return [arg for k, v in settings.items() for arg in ("-X", f"{k}={v}")]
