"""The test side of the worker scripts: start one in a session of its own, watch its
progress lines, SIGKILL everything it started.

A worker is a whole process tree: the driver's Python, the JVM it launches, the PySpark
daemon the JVM forks (which moves itself to a process group of its own, so ``killpg`` on
the driver's group misses it) and the Python workers running tasks. All of them stay in
the session the worker was started in (``start_new_session=True``), so ``kill`` SIGKILLs
by session id, as a machine losing power would stop them all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from confluent_kafka import Consumer, KafkaError, TopicPartition

from headrace.testing import scaled

REPO_ROOT = Path(__file__).resolve().parents[3]


def session_processes(sid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes of session ``sid``."""
    out = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def kill_session(sid: int, timeout: float = 10.0) -> int:
    """SIGKILL every process of session ``sid`` (its leader's group first, in one call),
    until none is left. Returns how many processes were signalled."""
    signalled = 0
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sid, signal.SIGKILL)
        signalled += 1
    deadline = time.monotonic() + scaled(timeout)
    while victims := session_processes(sid):
        for proc in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
                signalled += 1
        psutil.wait_procs(victims, timeout=1.0)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of session {sid} survive SIGKILL: {victims}")
    return signalled


class SparkWorker:
    """Incarnations of ``python -m <module> <args>``, one at a time, each with its stdout
    and stderr in files ``<log_dir>/<name>-<n>.out|.err``. Call ``kill`` in ``finally``."""

    def __init__(self, module: str, args: list[str], log_dir: Path, name: str = "worker"
                 ) -> None:
        self.module = module
        self.args = args
        self.log_dir = log_dir
        self.name = name
        self.process: subprocess.Popen[bytes] | None = None
        self.incarnations = 0
        self.started_at = 0.0

    def path(self, suffix: str) -> Path:
        return self.log_dir / f"{self.name}-{self.incarnations}.{suffix}"

    def spawn(self) -> None:
        assert self.process is None or self.process.poll() is not None
        self.incarnations += 1
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
                   PYSPARK_DRIVER_PYTHON=sys.executable, PYTHONUNBUFFERED="1")
        with open(self.path("out"), "wb") as out, open(self.path("err"), "wb") as err:
            self.process = subprocess.Popen([sys.executable, "-m", self.module, *self.args],
                                            cwd=REPO_ROOT, stdout=out, stderr=err,
                                            stdin=subprocess.DEVNULL, env=env,
                                            start_new_session=True)
        self.started_at = time.monotonic()

    def events(self) -> list[str]:
        """This incarnation's progress events so far (without their time stamps)."""
        if self.incarnations == 0 or not self.path("out").exists():
            return []
        return [line.partition(" ")[2] for line in self.path("out").read_text().splitlines()]

    def exited(self) -> bool:
        return self.process is None or self.process.poll() is not None

    def wait_for(self, prefix: str, timeout: float) -> bool:
        """Wait until the worker says an event starting with ``prefix`` (True) or exits
        without saying it (False). Raises ``TimeoutError`` with its stderr's tail.
        ``timeout`` is scaled here (``headrace.testing.scaled``)."""
        deadline = time.monotonic() + scaled(timeout)
        while True:
            if any(e.startswith(prefix) for e in self.events()):
                return True
            if self.exited():
                return any(e.startswith(prefix) for e in self.events())
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {prefix!r} from {self.module} within "
                                   f"{scaled(timeout):g} s; "
                                   f"stderr ends:\n{self.stderr_tail()}")
            time.sleep(0.05)

    def wait_exit(self, timeout: float) -> int:
        assert self.process is not None
        try:
            return self.process.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"{self.module} still running after {scaled(timeout):g} s; stderr "
                               f"ends:\n{self.stderr_tail()}") from None

    def kill(self) -> None:
        """SIGKILL the incarnation's whole session (no-op when there is none)."""
        if self.process is None:
            return
        kill_session(self.process.pid)
        self.process.wait()

    def stderr_tail(self, lines: int = 40) -> str:
        if self.incarnations == 0 or not self.path("err").exists():
            return ""
        text = self.path("err").read_text(errors="replace").splitlines()
        return "\n".join(line for line in text[-lines:])


def read_topic(bootstrap: str, topic: str, read_committed: bool = True,
               timeout: float = 60.0) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """``(partition, offset, key, value)`` of every record of ``topic`` up to the end a
    consumer of that isolation level sees (the last stable offset for read_committed).
    Raises ``TimeoutError`` if some partition's end is not reached within ``timeout``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-workers-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed" if read_committed
                         else "read_uncommitted", "log_level": 3})
    try:
        parts = sorted(consumer.list_topics(topic, timeout=scaled(10)).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[int, int, bytes | None, bytes | None]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + scaled(timeout)
        while len(at_end) < len(parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(set(parts) - at_end)} not "
                                   f"read to their end within {scaled(timeout):g} s")
            # A short timeout: consume() waits for num_messages or the timeout, whichever
            # comes first, and the end of the log never fills a batch.
            for m in consumer.consume(10_000, timeout=0.2):
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"{topic}[{m.partition()}]: {err.str()}")
                    at_end.add(m.partition())
                else:
                    out.append((m.partition(), m.offset(), m.key(), m.value()))
        return out
    finally:
        consumer.close()
