"""A connector process (``headrace cdc postgres``) and a reader of its topics, for tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from typing import Any

import psycopg2
from confluent_kafka import Consumer, KafkaError, TopicPartition

from headrace.testing import EmbeddedBroker, ServerProcess, scaled

READY = "headrace cdc streaming "


class ConnectorProcess(ServerProcess):
    """``headrace cdc postgres`` as a subprocess; ``kill()`` is SIGKILL. ``env``: more
    environment (e.g. ``HEADRACE_COMMAND_CONFIG``, the client settings file)."""

    def __init__(self, dsn: str, tables: str, bootstrap: str, name: str,
                 *extra: str, env: dict[str, str] | None = None) -> None:
        self.env = dict(env or {})
        self.args = ["--dsn", dsn, "--tables", tables, "--bootstrap-servers", bootstrap,
                     "--topic-prefix", name, "--slot", name, "--publication", name,
                     "--heartbeat-seconds", "0.5", *extra]
        self.start_timeout = 60.0  # scaled by _wait_ready
        self.process: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=500)

    def start(self) -> ConnectorProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "headrace", "cdc", "postgres", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **self.env))
        self._wait_ready(READY, self.start_timeout, "connector")
        return self

    def __enter__(self) -> ConnectorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_topic(bootstrap: str, topic: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Every (key, value) of a topic, read_committed, in offset order (one partition)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    try:
        while True:
            msg = consumer.poll(scaled(10))
            assert msg is not None, f"no end of {topic}"
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                return out
            value = msg.value()
            out.append((json.loads(msg.key() or b"null"),
                        None if value is None else json.loads(value)))
    finally:
        consumer.close()


def execute(dsn: str, *statements: str, user: str | None = None) -> None:
    conn = psycopg2.connect(dsn + (f" user={user}" if user else ""))
    try:
        with conn, conn.cursor() as cur:  # one transaction
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def query(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(dsn)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall())
    finally:
        conn.close()


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "") -> Any:
    """``predicate()``'s first truthy value, polled until ``timeout`` (scaled) passes."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        found = predicate()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def wait_until(predicate: Any, what: str, timeout: float = 90.0) -> None:
    """Poll ``predicate()`` until it holds; fail naming ``what`` after ``timeout`` (scaled)."""
    wait_for(predicate, timeout, what)


def wait_events(broker: EmbeddedBroker, topic: str, count: int) -> list[Any]:
    """``read_topic`` once it holds at least ``count`` records."""
    return wait_for(lambda: (e := read_topic(broker.bootstrap_servers, topic))
                    and len(e) >= count and e, what=f"{count} records on {topic}")


class DebeziumProcess:
    """Debezium's embedded engine in a JVM run by ``cmd``, printing one event per line
    (topic, key JSON, value JSON, tab-separated), gathered in ``events`` as they come.
    ``stop()`` closes its stdin (the engines stop) and returns its stderr."""

    def __init__(self, cmd: list[str]) -> None:
        self.events: list[tuple[str, Any, Any]] = []
        self.process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            topic, key, value = line.rstrip("\n").split("\t", 2)
            self.events.append((topic, json.loads(key), json.loads(value)))

    def of(self, topic: str) -> list[tuple[Any, Any]]:
        return [(k, v) for t, k, v in list(self.events) if t == topic]

    def stop(self) -> str:
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        try:
            self.process.wait(scaled(30))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return self.process.stderr.read()
