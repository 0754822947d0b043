"""Many writers, threads and processes, on the same accounts; and kill -9 mid-append."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from headrace.eventsourcing import EventStore, Repository
from headrace.pipelines.bank.domain import Account
from headrace.testing import scaled
from tests.conftest import AnyBroker
from tests.eventsourcing.conftest import by_aggregate, fold, log_events

ROOT = Path(__file__).resolve().parents[2]


def worker(bootstrap: str, topic: str, name: str, mode: str, commands: int, threads: int,
           seed: int, *accounts: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.eventsourcing.worker", bootstrap, topic, name, mode,
         str(commands), str(threads), str(seed), *accounts],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"})


def test_writers_in_threads_and_processes_never_overdraw(
        any_broker: AnyBroker, accounts: Repository[Account], store: EventStore) -> None:
    names = ["acc-a", "acc-b", "acc-c"]
    for n in names:
        accounts.execute(n, lambda a: a.open("ann"))
        accounts.execute(n, lambda a: a.deposit(300))
    procs = [worker(any_broker.bootstrap_servers, store.topic, f"p{i}", "race", 25, 3, i, *names)
             for i in range(3)]
    outcomes: list[dict[str, object]] = []
    for p in procs:
        out, err = p.communicate(timeout=scaled(240))
        assert p.returncode == 0, err[-3000:]
        outcomes += [json.loads(line) for line in out.splitlines()]
    assert len(outcomes) == 3 * 3 * 25
    tally = Counter(str(o["outcome"]) for o in outcomes)
    assert tally["ok"] > 0 and tally["conflict"] > 0, tally  # they really raced

    logged = by_aggregate(log_events(any_broker.bootstrap_servers, store.topic))
    by_command = {(e.aggregate_id, e.command_id): e.version
                  for events in logged.values() for e in events}
    for name in names:
        events = logged[name]
        # Every accepted event applies to the version it expected: one history, no gaps.
        assert [e.version for e in events] == list(range(1, len(events) + 1))
        final = fold(events)  # asserts the balance never goes below zero
        assert vars(accounts.load(name)) == vars(final)
    accepted = {(str(o["account"]), str(o["command"])): o["first"]
                for o in outcomes if o["outcome"] == "ok"}
    writes = {k: v for k, v in by_command.items() if k[1].startswith("p")}
    assert writes == accepted  # each acknowledged command exactly once, nothing else


@pytest.mark.slow
def test_kill_9_mid_append_loses_and_duplicates_nothing(
        any_broker: AnyBroker, accounts: Repository[Account], store: EventStore) -> None:
    accounts.execute("acc-k", lambda a: a.open("ann"))
    total = 120
    acked: set[int] = set()
    for round_ in range(4):
        p = worker(any_broker.bootstrap_servers, store.topic, "k", "deposits", total, 1, 0,
                   "acc-k")
        assert p.stdout is not None
        deadline = time.monotonic() + 0.3 + 0.4 * round_
        if round_ < 3:
            while time.monotonic() < deadline:
                line = p.stdout.readline()
                if not line:
                    break
                acked.add(int(json.loads(line)["ack"]))
            p.send_signal(signal.SIGKILL)
            p.wait()
        else:
            out, err = p.communicate(timeout=scaled(240))
            assert p.returncode == 0, err[-3000:]
            acked |= {int(json.loads(line)["ack"]) for line in out.splitlines()}
    assert acked == set(range(1, total + 1))
    events = by_aggregate(log_events(any_broker.bootstrap_servers, store.topic))["acc-k"]
    deposits = Counter(e.command_id for e in events[1:])
    assert deposits == Counter({f"k-{i}": 1 for i in range(1, total + 1)})
    assert fold(events).balance == total * (total + 1) // 2
