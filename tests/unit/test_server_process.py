"""``headrace.testing.ServerProcess``: waiting for a server's ready line has a deadline even
when the server prints nothing (a silent JVM, e.g. Apache Kafka without its logging
configuration, hung its test in ``readline`` until pytest's timeout)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import deque

import pytest

from headrace.testing import ServerProcess
from headrace.testing.process import EmbeddedBrokerError


class Script(ServerProcess):
    def __init__(self, code: str) -> None:
        self.output: deque[str] = deque(maxlen=500)
        self.process: subprocess.Popen[str] | None = subprocess.Popen(
            [sys.executable, "-u", "-c", code], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)


def test_a_silent_server_fails_at_the_deadline_and_is_killed() -> None:
    server = Script("import time; time.sleep(120)")
    t0 = time.monotonic()
    with pytest.raises(EmbeddedBrokerError, match="silent did not start in time"):
        server._wait_ready("ready", 1.0, "silent")
    assert time.monotonic() - t0 < 60
    assert server.process is not None and server.process.poll() is not None


def test_the_ready_line_is_returned_and_later_output_still_kept() -> None:
    server = Script("import time; print('warming'); print('server ready on 1'); "
                    "time.sleep(0.2); print('after'); time.sleep(120)")
    try:
        assert server._wait_ready("ready", 30.0, "s") == "server ready on 1\n"
        deadline = time.monotonic() + 30
        while "after\n" not in server.output_lines():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert server.output_lines() == ["warming\n", "server ready on 1\n", "after\n"]
    finally:
        server.kill()


def test_a_server_that_exits_during_start_up_says_so_with_its_output() -> None:
    server = Script("print('bad config'); raise SystemExit(3)")
    with pytest.raises(EmbeddedBrokerError, match=r"(?s)s exited during start-up:.*bad config"):
        server._wait_ready("ready", 30.0, "s")
