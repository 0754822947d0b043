"""Consumer groups: failover, rebalance and offset-commit speed of headrace and Tansu.

Usage::

    .venv/bin/python bench/groups.py                 # full run, headrace and Tansu
    .venv/bin/python bench/groups.py --quick         # one trial each, shorter commit loops
    .venv/bin/python bench/groups.py --write-md      # also refresh BENCHMARKS.md
    .venv/bin/python bench/groups.py --brokers all --only commits

Every group member is a librdkafka (confluent-kafka) consumer in its own process, using the
classic group protocol with ``subscribe()``, session.timeout.ms=6000 and
heartbeat.interval.ms=1000, and reporting its rebalance callbacks and first records, time
stamped with CLOCK_MONOTONIC (one host, one clock), to this process. Each scenario runs on a
freshly started broker, against every broker before moving to the next scenario.

1. Failover: 3 members over a 6-partition topic while a producer here sends a steady stream
   to every partition; once every member consumes its partitions, one member is killed
   (SIGKILL, so it never leaves the group). Timed from the kill to: a survivor's revoke
   callback (the rebalance noticed), the dead member's partitions assigned to survivors,
   and the first record of each of those partitions consumed by a survivor (mean and max
   over the partitions). In the full run the group is brought back to 3 and a second member
   is killed.
2. Rebalance: 8 members start together (``subscribe()`` released at once) over a
   64-partition topic: time from the last ``subscribe()`` until the 8 members' assignments
   are disjoint and cover all 64 partitions. Then a 9th member subscribes to the stable group
   (time until the 9 assignments cover the topic), and leaves again with ``close()`` (time
   until the 8 remaining cover it). Assignments count as settled once they cover the topic
   and no member is told of another rebalance for 1.5 s afterwards.
3. Offset commits: 1 and then 4 members (own group each, 4-partition topic), each assigned
   partitions, committing one partition's offset (a new one every time) in a loop, first
   synchronously (``commit(offsets=..., asynchronous=False)``), then asynchronously with up
   to 1,000 commits outstanding per member (completion counted by the ``on_commit``
   callback); commits/s summed over the members. The last offset is read back with
   ``committed()`` and checked, as is any error reported for a commit. A 0.5 s sync loop
   on each member comes first and is not counted.

Members released together heartbeat in step, so each trigger (kill, join, leave) first waits
a pseudo-random fraction of the heartbeat interval (the same sequence for every broker);
else it would land at the same point of the heartbeat cycle every time.

A scenario that fails on a broker (an error, a timeout) is reported as ``failed: reason``
in its cells; the other figures are still printed and written.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import random
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from brokers import (
    ALL_SPECS,
    BrokerSpec,
    RunningBroker,
    add_brokers_option,
    create_topic,
    running,
)
from clients import cpu_seconds
from report import (
    arguments,
    fmt_float,
    fmt_int,
    publish,
    show_environment,
    table,
)

SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 1_000
FAILOVER_PARTITIONS = 6
FAILOVER_MEMBERS = 3
FAILOVER_RATE = 1_200  # records/s over all partitions (200/s each, one every 5 ms)
REBALANCE_PARTITIONS = 64
REBALANCE_MEMBERS = 8
COMMIT_PARTITIONS = 4
COMMIT_MEMBER_COUNTS = (1, 4)
COMMIT_WARMUP_S = 0.5  # a discarded sync loop first, on each member
ASYNC_WINDOW = 1_000  # outstanding asynchronous commits per member
ASYNC_BASE = 1_000_000_000  # async commits use offsets from here (sync ones count from 1)
STABLE_S = 1.5  # settled = covered and no new rebalance seen for this long
STEADY_S = 1.0  # failover: all members consuming for this long before the kill
# Each trigger (kill, join, leave) first waits a pseudo-random 0-1 heartbeat interval, the
# same sequence for every broker (see the module docstring).
JITTER_SEED = 20_251_122
START_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 60.0
FAILOVER_TIMEOUT_S = SESSION_TIMEOUT_MS / 1000 + 30.0

Event = tuple[Any, ...]


# --- the member processes ------------------------------------------------------------------


def member_main(
    idx: int,
    bootstrap: str,
    group_id: str,
    topic: str,
    overrides: dict[str, object],
    events: mp.Queue[Event],
    commands: mp.Queue[tuple[Any, ...]],
) -> None:
    """Child process: one group member, driven by ``commands``, reporting on ``events``."""
    now = time.monotonic
    seen: set[int] = set()  # partitions with a record consumed since the last assignment
    assigned: list[int] = []
    async_done = [0, 0]  # completed async commits, failed ones

    def on_assign(_c: Consumer, parts: list[TopicPartition]) -> None:
        t = now()
        seen.clear()
        assigned[:] = sorted(p.partition for p in parts)
        events.put(("assign", idx, list(assigned), t))

    def on_revoke(_c: Consumer, parts: list[TopicPartition]) -> None:
        t = now()
        assigned.clear()
        events.put(("revoke", idx, sorted(p.partition for p in parts), t))

    def on_commit(err: KafkaError | None, parts: list[TopicPartition]) -> None:
        # Count only the asynchronous loop's commits (offsets from ASYNC_BASE).
        if parts and parts[0].offset >= ASYNC_BASE:
            async_done[0] += 1
            if err is not None or any(p.error is not None for p in parts):
                async_done[1] += 1

    def on_error(err: KafkaError) -> None:
        events.put(("error", idx, f"{err}", now()))

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "on_commit": on_commit,
            "error_cb": on_error,
            "log_level": 3,
            **overrides,
        }
    )
    try:
        consumer.list_topics(topic, timeout=10.0)  # connected before anything is timed
        events.put(("ready", idx, now()))
        while True:
            try:
                cmd = commands.get_nowait()
            except queue.Empty:
                cmd = None
            if cmd is not None:
                if cmd[0] == "subscribe":
                    t = now()
                    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
                    events.put(("subscribed", idx, t))
                elif cmd[0] == "commit":
                    events.put(_commit_loop(idx, consumer, topic, assigned, cmd, async_done))
                elif cmd[0] == "close":
                    t = now()
                    consumer.close()
                    events.put(("closed", idx, t, now()))
                    return
            for m in consumer.consume(500, 0.02):
                err = m.error()
                if err is not None:
                    events.put(("error", idx, f"{err}", now()))
                    continue
                p = m.partition()
                if p is not None and p not in seen:
                    seen.add(p)
                    events.put(("first", idx, p, now()))
    except Exception as e:
        events.put(("error", idx, f"member crashed: {type(e).__name__}: {e}", now()))
        raise


def _commit_loop(
    idx: int,
    consumer: Consumer,
    topic: str,
    assigned: list[int],
    cmd: tuple[Any, ...],
    async_done: list[int],
) -> Event:
    """Commit one partition's offset in a loop for ``duration`` s; returns a result event."""
    _, mode, duration = cmd
    now = time.monotonic
    if not assigned:
        return ("commits", idx, mode, 0, 0, 0.0, 0.0, "no partition assigned")
    p = assigned[0]
    failed = 0
    first_error = ""
    start = now()
    end = start + duration
    if mode == "sync":
        offset = 0
        while now() < end:
            offset += 1
            try:
                res = consumer.commit(
                    offsets=[TopicPartition(topic, p, offset)], asynchronous=False
                )
                errs: list[object] = [tp.error for tp in res or [] if tp.error is not None]
            except KafkaException as e:
                errs = [e]
            if errs:
                failed += 1
                first_error = first_error or str(errs[0])
                if failed > 100:
                    break
        done = offset
        finish = now()
        last = offset
    else:
        async_done[0] = async_done[1] = 0
        issued = 0
        commit, poll = consumer.commit, consumer.poll
        while now() < end:
            if issued - async_done[0] < ASYNC_WINDOW:
                issued += 1
                commit(offsets=[TopicPartition(topic, p, ASYNC_BASE + issued)], asynchronous=True)
                if issued % 64 == 0:
                    poll(0)
            else:
                poll(0.001)
        drain_until = now() + 30.0
        while async_done[0] < issued and now() < drain_until:
            poll(0.001)
        finish = now()
        done, failed = async_done[0], async_done[1]
        if done < issued:
            first_error = f"{issued - done} of {issued} async commits never completed"
        elif failed:
            first_error = f"{failed} async commits failed"
        last = ASYNC_BASE + issued
    if not first_error:
        try:
            got = consumer.committed([TopicPartition(topic, p)], timeout=10.0)[0].offset
            if got != last:
                first_error = f"committed() reads {got} after committing {last} last"
        except KafkaException as e:
            first_error = f"committed() failed: {e}"
    return ("commits", idx, mode, done, failed, start, finish, first_error)


# --- the coordinating side -------------------------------------------------------------------


@dataclass
class Members:
    """Member processes of one group, and what they reported."""

    bootstrap: str
    group_id: str
    topic: str
    partitions: int
    overrides: dict[str, object] = field(default_factory=dict)
    ctx: Any = field(default_factory=lambda: mp.get_context("spawn"))
    procs: dict[int, BaseProcess] = field(default_factory=dict)
    commands: dict[int, Any] = field(default_factory=dict)
    events: Any = None
    live: set[int] = field(default_factory=set)
    ready: set[int] = field(default_factory=set)
    subscribed: dict[int, float] = field(default_factory=dict)
    assignment: dict[int, list[int] | None] = field(default_factory=dict)
    assigned_at: dict[int, float] = field(default_factory=dict)
    revokes: list[tuple[float, int]] = field(default_factory=list)
    assigns: int = 0
    firsts: list[tuple[float, int, int]] = field(default_factory=list)
    seen: dict[int, set[int]] = field(default_factory=dict)
    closed: dict[int, float] = field(default_factory=dict)
    results: dict[tuple[int, str], Event] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.events = self.ctx.Queue()

    def start(self, n: int) -> list[int]:
        """Start ``n`` more member processes and wait until each is connected."""
        new = list(range(len(self.procs), len(self.procs) + n))
        for i in new:
            self.commands[i] = self.ctx.Queue()
            self.procs[i] = self.ctx.Process(
                target=member_main,
                args=(
                    i,
                    self.bootstrap,
                    self.group_id,
                    self.topic,
                    self.overrides,
                    self.events,
                    self.commands[i],
                ),
                daemon=True,
            )
            self.procs[i].start()
        self.until(lambda: all(i in self.ready for i in new), START_TIMEOUT_S, "members to start")
        return new

    def subscribe(self, ids: list[int]) -> None:
        for i in ids:
            self.commands[i].put(("subscribe",))
            self.live.add(i)

    def kill(self, i: int) -> float:
        t = time.monotonic()
        self.procs[i].kill()  # SIGKILL: no LeaveGroup
        self.live.discard(i)
        return t

    def close(self, i: int) -> None:
        self.commands[i].put(("close",))
        self.live.discard(i)

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.is_alive():
                p.kill()
        for p in self.procs.values():
            p.join(5)

    def wait(self, seconds: float) -> None:
        """Keep handling events for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.pump(min(0.05, max(0.0, end - time.monotonic())))

    def rounds_since(self, assigns: int) -> int:
        """Rebalances seen since ``assigns`` (assign callbacks per live member)."""
        return -(-(self.assigns - assigns) // max(1, len(self.live)))

    def pump(self, timeout: float) -> None:
        try:
            ev = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        kind, i = ev[0], ev[1]
        if kind == "ready":
            self.ready.add(i)
        elif kind == "subscribed":
            self.subscribed[i] = ev[2]
        elif kind == "assign":
            self.assignment[i], self.assigned_at[i] = ev[2], ev[3]
            self.seen[i] = set()
            self.assigns += 1
        elif kind == "revoke":
            self.assignment[i] = None
            self.revokes.append((ev[3], i))
        elif kind == "first":
            self.firsts.append((ev[3], i, ev[2]))
            self.seen.setdefault(i, set()).add(ev[2])
        elif kind == "closed":
            self.closed[i] = ev[2]
        elif kind == "commits":
            self.results[(i, ev[2])] = ev
        elif kind == "error":
            self.errors.append(f"member {i}: {ev[2]}")
            if len(self.errors) <= 5:
                print(f"    [member {i}] {ev[2]}", file=sys.stderr, flush=True)

    def until(self, pred: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            dead = [i for i in self.live if not self.procs[i].is_alive()]
            if dead:
                raise RuntimeError(f"member {dead[0]} died while waiting for {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"timed out after {timeout:.0f}s waiting for {what}" + self._why()
                )
            self.pump(0.05)

    def _why(self) -> str:
        parts = [f"; assignments {self.assignment_summary()}"]
        if self.errors:
            parts.append(f"; {len(self.errors)} client errors, last: {self.errors[-1]}")
        return "".join(parts)

    def assignment_summary(self) -> str:
        return ", ".join(
            f"{i}:{'-' if self.assignment.get(i) is None else len(self.assignment[i] or [])}"
            for i in sorted(self.live)
        )

    def covered_at(self) -> float | None:
        """When the live members' assignments became disjoint and covered the topic."""
        total: list[int] = []
        for i in self.live:
            a = self.assignment.get(i)
            if a is None:
                return None
            total.extend(a)
        if len(total) != self.partitions or set(total) != set(range(self.partitions)):
            return None
        return max(self.assigned_at[i] for i in self.live)

    def settle(self, timeout: float = SETTLE_TIMEOUT_S) -> float:
        """Wait until covered, then STABLE_S without a change; returns when it was covered."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            self.until(lambda: self.covered_at() is not None, max(left, 0.0), "assignments")
            at = self.covered_at()
            stable_until = time.monotonic() + STABLE_S
            while time.monotonic() < stable_until and self.covered_at() == at:
                self.pump(0.05)
            if self.covered_at() == at and at is not None:
                return at
            if time.monotonic() > deadline:
                raise RuntimeError("assignments never settled" + self._why())


@contextlib.contextmanager
def members(*args: Any, **kwargs: Any) -> Iterator[Members]:
    m = Members(*args, **kwargs)
    try:
        yield m
    finally:
        m.stop_all()


class SteadyProducer:
    """Produces ``rate`` records/s round-robin over the partitions on a background thread."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": 1,
                "linger.ms": 1,
                "enable.idempotence": False,
                "log_level": 3,
                "on_delivery": self._on_delivery,
            }
        )
        self._args = (topic, partitions, rate)
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def _on_delivery(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))

    def _run(self) -> None:
        topic, partitions, rate = self._args
        interval = 1.0 / rate
        start = time.monotonic()
        value = b"x" * 100
        while not self._stop.is_set():
            due = start + self.sent * interval
            wait = due - time.monotonic()
            if wait > 0:
                self._producer.poll(min(wait, 0.05))
                continue
            self._producer.produce(topic, value, partition=self.sent % partitions)
            self.sent += 1
        self._producer.flush(10.0)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(15.0)
        # Destroy the client now, before the broker stops, or it logs failed reconnects.
        del self._producer


# --- scenarios -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailoverTrial:
    noticed_s: float  # kill -> first survivor revoke callback
    reassigned_s: float  # kill -> last of the dead member's partitions assigned to a survivor
    consumed_s: list[float]  # kill -> first record per dead partition, consumed by a survivor

    @property
    def after_notice_s(self) -> float:
        """From the rebalance noticed to the last dead partition consumed again."""
        return max(self.consumed_s) - self.noticed_s


def _jitter(rng: random.Random) -> float:
    return rng.uniform(0.0, HEARTBEAT_INTERVAL_MS / 1000)


def _failover_trial(g: Members, victim: int, jitter: float) -> FailoverTrial:
    dead = list(g.assignment.get(victim) or [])
    if not dead:
        raise RuntimeError(f"member {victim} has no partition to lose")
    # Steady state: every live member has consumed from each of its partitions.
    g.until(
        lambda: all(set(g.assignment.get(i) or []) <= g.seen.get(i, set()) for i in g.live),
        SETTLE_TIMEOUT_S,
        "every member to consume its partitions",
    )
    g.wait(STEADY_S + jitter)
    n_revokes, n_firsts = len(g.revokes), len(g.firsts)
    t_kill = g.kill(victim)

    def taken() -> dict[int, float]:
        out: dict[int, float] = {}
        for t, i, p in g.firsts[n_firsts:]:
            if i != victim and p in dead and t > t_kill and p not in out:
                out[p] = t
        return out

    g.until(lambda: len(taken()) == len(dead), FAILOVER_TIMEOUT_S, "survivors to consume")
    consumed = taken()
    noticed = min((t for t, i in g.revokes[n_revokes:] if i != victim), default=float("nan"))
    owners = {p: i for i in g.live for p in g.assignment.get(i) or []}
    reassigned = max(g.assigned_at[owners[p]] for p in dead if p in owners)
    return FailoverTrial(
        noticed - t_kill, reassigned - t_kill, [consumed[p] - t_kill for p in sorted(dead)]
    )


def run_failover(broker: RunningBroker, trials: int) -> list[FailoverTrial]:
    bootstrap = broker.bootstrap_servers
    rng = random.Random(JITTER_SEED)
    topic = "bench-failover"
    create_topic(bootstrap, topic, FAILOVER_PARTITIONS)
    out: list[FailoverTrial] = []
    with (
        SteadyProducer(bootstrap, topic, FAILOVER_PARTITIONS, FAILOVER_RATE) as producer,
        members(
            bootstrap,
            "bench-failover",
            topic,
            FAILOVER_PARTITIONS,
            {"enable.auto.commit": True, "auto.commit.interval.ms": 1000},
        ) as g,
    ):
        ids = g.start(FAILOVER_MEMBERS + trials - 1)  # spares replace the killed ones
        spares = ids[FAILOVER_MEMBERS:]
        g.subscribe(ids[:FAILOVER_MEMBERS])
        g.settle()
        for trial in range(trials):
            if trial:
                g.settle()
                g.subscribe([spares[trial - 1]])
                g.settle()
            victim = min(g.live)
            r = _failover_trial(g, victim, _jitter(rng))
            print(
                f"    kill {trial + 1}: noticed {r.noticed_s:.2f}s, reassigned "
                f"{r.reassigned_s:.2f}s, consumed mean {statistics.mean(r.consumed_s):.2f}s "
                f"max {max(r.consumed_s):.2f}s ({r.after_notice_s:.2f}s after notice)",
                flush=True,
            )
            out.append(r)
        if producer.errors:
            raise RuntimeError(
                f"{len(producer.errors)} produce errors, first: {producer.errors[0]}"
            )
    return out


@dataclass(frozen=True)
class RebalanceResult:
    initial_s: float  # 8 members from the last subscribe() to covered
    join_s: list[float]  # a 9th member's subscribe() to covered by 9
    leave_s: list[float]  # the 9th member's close() to covered by 8


def run_rebalance(broker: RunningBroker, cycles: int) -> RebalanceResult:
    bootstrap = broker.bootstrap_servers
    rng = random.Random(JITTER_SEED)
    topic = "bench-rebalance"
    create_topic(bootstrap, topic, REBALANCE_PARTITIONS)
    joins: list[float] = []
    leaves: list[float] = []
    with members(bootstrap, "bench-rebalance", topic, REBALANCE_PARTITIONS) as g:
        ids = g.start(REBALANCE_MEMBERS + cycles)
        first, extra = ids[:REBALANCE_MEMBERS], ids[REBALANCE_MEMBERS:]
        g.subscribe(first)
        g.until(lambda: all(i in g.subscribed for i in first), START_TIMEOUT_S, "subscribe()")
        initial = g.settle() - max(g.subscribed[i] for i in first)
        print(
            f"    {len(first)} members assigned {initial:.2f}s after the last subscribe() "
            f"({g.rounds_since(0)} rebalance(s))",
            flush=True,
        )
        for i in extra:
            g.wait(_jitter(rng))
            n = g.assigns
            g.subscribe([i])
            g.until(lambda i=i: i in g.subscribed, START_TIMEOUT_S, "subscribe()")  # type: ignore[misc]
            joins.append(g.settle() - g.subscribed[i])
            join_rounds = g.rounds_since(n)
            g.wait(_jitter(rng))
            n = g.assigns
            g.close(i)
            g.until(lambda i=i: i in g.closed, START_TIMEOUT_S, "close()")  # type: ignore[misc]
            leaves.append(g.settle() - g.closed[i])
            print(
                f"    extra member: join {joins[-1]:.2f}s ({join_rounds} rebalance(s)), "
                f"leave {leaves[-1]:.2f}s ({g.rounds_since(n)} rebalance(s))",
                flush=True,
            )
    return RebalanceResult(initial, joins, leaves)


@dataclass(frozen=True)
class CommitResult:
    members: int
    sync_per_s: float
    async_per_s: float
    sync_cpu_us: float  # broker CPU per commit
    async_cpu_us: float


def _commit_phase(
    g: Members, ids: list[int], mode: str, duration: float, cpu: Callable[[], float]
) -> tuple[float, float]:
    """Run one commit loop on every member; returns (commits/s, broker CPU us/commit)."""
    cpu0 = cpu()
    for i in ids:
        g.commands[i].put(("commit", mode, duration))
    g.until(
        lambda: all((i, mode) in g.results for i in ids),
        duration + 60.0,
        f"{mode} commit loops",
    )
    evs = [g.results.pop((i, mode)) for i in ids]
    for ev in evs:
        if ev[7]:
            raise RuntimeError(f"{mode} commits, member {ev[1]}: {ev[7]}")
    used = cpu() - cpu0  # includes the committed() read-backs: a few requests
    done = sum(ev[3] for ev in evs)
    window = max(ev[6] for ev in evs) - min(ev[5] for ev in evs)
    if done <= 0 or window <= 0:
        raise RuntimeError(f"{mode} commits: none completed")
    return done / window, used / done * 1e6


def run_commits(broker: RunningBroker, duration: float) -> list[CommitResult]:
    bootstrap = broker.bootstrap_servers
    cpu = cpu_seconds(broker.pid)
    topic = "bench-commits"
    create_topic(bootstrap, topic, COMMIT_PARTITIONS)
    out: list[CommitResult] = []
    for n in COMMIT_MEMBER_COUNTS:
        with members(
            bootstrap,
            f"bench-commits-{n}",
            topic,
            COMMIT_PARTITIONS,
            {"enable.auto.commit": False, "auto.offset.reset": "latest"},
        ) as g:
            ids = g.start(n)
            g.subscribe(ids)
            g.settle()
            _commit_phase(g, ids, "sync", COMMIT_WARMUP_S, cpu)  # warm-up, discarded
            sync, sync_cpu = _commit_phase(g, ids, "sync", duration, cpu)
            asyn, async_cpu = _commit_phase(g, ids, "async", duration, cpu)
            print(
                f"    {n} member(s): sync {fmt_int(sync)} commits/s "
                f"({sync_cpu:.0f} us broker CPU each), async {fmt_int(asyn)} commits/s "
                f"({async_cpu:.0f} us each)",
                flush=True,
            )
            out.append(CommitResult(n, sync, asyn, sync_cpu, async_cpu))
    return out


# --- running and reporting -------------------------------------------------------------------


@dataclass
class BrokerResults:
    spec: BrokerSpec
    failover: list[FailoverTrial] | None = None
    rebalance: RebalanceResult | None = None
    commits: list[CommitResult] | None = None
    errors: dict[str, str] = field(default_factory=dict)


def attempt(res: BrokerResults, scenario: str, fn: Callable[[RunningBroker], Any]) -> Any:
    """Run one scenario on a fresh broker; a failure is recorded, not raised."""
    print(f"[{scenario}] {res.spec.name}", flush=True)
    started = time.monotonic()
    try:
        with running(res.spec) as broker:
            out = fn(broker)
        print(f"    ({time.monotonic() - started:.0f} s)", flush=True)
        return out
    except Exception as e:  # one broker's failure must not lose the others' figures
        traceback.print_exc()
        reason = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        res.errors[scenario] = reason
        print(f"[{scenario}] {res.spec.name}: FAILED {reason}", flush=True)
        return None


def _failed(res: BrokerResults, scenario: str) -> str:
    return f"failed: {res.errors.get(scenario, 'no result')}"


def _speedup(values: dict[str, float | None], spec: BrokerSpec, lower_is_better: bool) -> str:
    """headrace vs Tansu, oriented so that above 1x means headrace did better."""
    mine, tansu = values.get(spec.key), values.get("tansu")
    if spec.kind == "tansu" or mine is None or tansu is None or mine <= 0 or tansu <= 0:
        return "-"
    return f"{(tansu / mine if lower_is_better else mine / tansu):.2f}x"


def render_failover(results: list[BrokerResults]) -> str:
    means: dict[str, float | None] = {}
    maxes: dict[str, float | None] = {}
    for r in results:
        if r.failover:
            consumed = [x for t in r.failover for x in t.consumed_s]
            means[r.spec.key], maxes[r.spec.key] = statistics.mean(consumed), max(consumed)
    rows: list[list[str]] = []
    for r in results:
        if not r.failover:
            rows.append([r.spec.name, _failed(r, "failover"), *["-"] * 6])
            continue
        k = r.spec.key
        rows.append(
            [
                r.spec.name,
                str(len(r.failover)),
                fmt_float(means[k] or 0.0, 2),
                _speedup(means, r.spec, True),
                fmt_float(maxes[k] or 0.0, 2),
                _speedup(maxes, r.spec, True),
                fmt_float(statistics.mean(t.noticed_s for t in r.failover), 2),
                fmt_float(statistics.mean(t.after_notice_s for t in r.failover), 2),
            ]
        )
    return table(
        [
            "broker",
            "kills",
            "consumed again s (mean)",
            "vs Tansu",
            "consumed again s (max)",
            "vs Tansu",
            "noticed s",
            "noticed to consumed s",
        ],
        rows,
    )


def render_rebalance(results: list[BrokerResults]) -> str:
    initial: dict[str, float | None] = {}
    join: dict[str, float | None] = {}
    leave: dict[str, float | None] = {}
    for r in results:
        if r.rebalance:
            initial[r.spec.key] = r.rebalance.initial_s
            join[r.spec.key] = statistics.median(r.rebalance.join_s)
            leave[r.spec.key] = statistics.median(r.rebalance.leave_s)
    rows: list[list[str]] = []
    for r in results:
        if not r.rebalance:
            rows.append([r.spec.name, _failed(r, "rebalance"), "-", "-", "-", "-", "-"])
            continue
        k = r.spec.key
        rows.append(
            [
                r.spec.name,
                fmt_float(initial[k] or 0.0, 2),
                _speedup(initial, r.spec, True),
                fmt_float(join[k] or 0.0, 2),
                _speedup(join, r.spec, True),
                fmt_float(leave[k] or 0.0, 2),
                _speedup(leave, r.spec, True),
            ]
        )
    return table(
        [
            "broker",
            f"{REBALANCE_MEMBERS} join s",
            "vs Tansu",
            "9th joins s",
            "vs Tansu",
            "9th leaves s",
            "vs Tansu",
        ],
        rows,
    )


def render_commits(results: list[BrokerResults]) -> str:
    rows: list[list[str]] = []
    for n in COMMIT_MEMBER_COUNTS:
        sync: dict[str, float | None] = {}
        asyn: dict[str, float | None] = {}
        by_key: dict[str, CommitResult] = {}
        for r in results:
            for one in r.commits or []:
                if one.members == n:
                    sync[r.spec.key], asyn[r.spec.key] = one.sync_per_s, one.async_per_s
                    by_key[r.spec.key] = one
        for r in results:
            c = by_key.get(r.spec.key)
            if c is None:
                rows.append([r.spec.name, str(n), _failed(r, "commits"), *["-"] * 5])
                continue
            rows.append(
                [
                    r.spec.name,
                    str(n),
                    fmt_int(c.sync_per_s),
                    _speedup(sync, r.spec, False),
                    fmt_int(c.sync_cpu_us),
                    fmt_int(c.async_per_s),
                    _speedup(asyn, r.spec, False),
                    fmt_int(c.async_cpu_us),
                ]
            )
    return table(
        [
            "broker",
            "members",
            "sync commits/s",
            "vs Tansu",
            "broker CPU us/commit",
            "async commits/s",
            "vs Tansu",
            "broker CPU us/commit",
        ],
        rows,
    )


def notes(scenarios: list[str], trials: int, cycles: int, duration: float) -> list[str]:
    out = [
        "members: librdkafka consumers, one process each, classic protocol, subscribe(), "
        f"session.timeout.ms={SESSION_TIMEOUT_MS}, heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}, "
        "default assignor (range); each scenario on a freshly started broker; each trigger "
        "(kill, join, leave) comes after a pseudo-random 0-1 s pause (same sequence for every "
        "broker) so that it does not always hit the same point of the heartbeat cycle",
    ]
    if "failover" in scenarios:
        out.append(
            f"failover: {FAILOVER_MEMBERS} members, {FAILOVER_PARTITIONS} partitions, "
            f"{FAILOVER_RATE:,} records/s produced round-robin throughout, auto-commit every "
            f"1 s; {trials} kill(s) (SIGKILL) per broker, the group brought back to "
            f"{FAILOVER_MEMBERS} members between kills; consumed again = from the kill to a "
            "survivor's first record of each of the dead member's partitions (mean and max "
            "over those partitions); noticed = from the kill to the first survivor's revoke "
            "callback: the session timeout "
            f"({SESSION_TIMEOUT_MS / 1000:g} s after the dead member's last heartbeat) plus up "
            "to a heartbeat interval, for any broker; noticed to consumed = the rest, mostly "
            "the coordinator's rebalance (waiting for every survivor's next heartbeat, at most "
            f"{HEARTBEAT_INTERVAL_MS / 1000:g} s, then join and sync)"
        )
    if "rebalance" in scenarios:
        out.append(
            f"rebalance: {REBALANCE_MEMBERS} members released together, "
            f"{REBALANCE_PARTITIONS} partitions, timed from the last subscribe() until the "
            "assignments reported by the members are disjoint and cover every partition "
            f"(then {STABLE_S:g} s without a further rebalance); 9th member: from its "
            "subscribe() / close() (LeaveGroup) to the same condition, median of "
            f"{cycles} join-and-leave cycle(s); it includes the other members' wait for their "
            "next heartbeat and any delay the coordinator adds (headrace: 300 ms initial "
            "rebalance delay for a group starting from empty)"
        )
    if "commits" in scenarios:
        out.append(
            f"commits: each member commits one offset of its own partition per call for "
            f"{duration:g} s (after a discarded {COMMIT_WARMUP_S:g} s sync loop): sync = commit(asynchronous=False) in a loop; async = "
            f"commit(asynchronous=True) with up to {ASYNC_WINDOW:,} outstanding per member, "
            "completions counted by on_commit; commits/s summed over members, the last "
            "committed offset checked with committed(); broker CPU = the broker process's "
            "user+system CPU over the loop / commits. headrace appends each commit to "
            "__consumer_offsets before answering (fsynced first only with --fsync); Tansu "
            f"stores in memory. With {max(COMMIT_MEMBER_COUNTS)} members the member processes "
            f"and the broker share {os.cpu_count()} cores. One member's sync loop is one "
            "request at a time, bound by round-trip latency: while writing this script it "
            "varied by up to 2x from run to run for both brokers, more than any other figure "
            "here; compare brokers on it with care"
        )
    out.append(
        '"vs Tansu": above 1x means headrace did better (Tansu time / headrace time, or '
        "headrace commits/s / Tansu commits/s)"
    )
    return out


SCENARIOS = ("failover", "rebalance", "commits")


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, "groups")
    add_brokers_option(ap, ALL_SPECS, "headrace,tansu")
    ap.add_argument(
        "--only", default=",".join(SCENARIOS), help="scenarios: failover, rebalance, commits"
    )
    ap.add_argument("--quick", action="store_true", help="one trial each, 1 s commit loops")
    ap.add_argument("--kills", type=int, default=None, help="failover kills (default 2; quick 1)")
    ap.add_argument(
        "--cycles", type=int, default=None, help="9th member join/leave cycles (default 3; quick 1)"
    )
    ap.add_argument(
        "--commit-seconds",
        type=float,
        default=None,
        help="length of each commit loop (default 3; quick 1)",
    )
    args = ap.parse_args(argv)
    specs: list[BrokerSpec] = args.brokers
    scenarios = [s.strip() for s in args.only.split(",")]
    for s in scenarios:
        if s not in SCENARIOS:
            raise SystemExit(f"unknown scenario {s!r}; choose from {', '.join(SCENARIOS)}")
    trials = args.kills or (1 if args.quick else 2)
    cycles = args.cycles or (1 if args.quick else 3)
    duration = args.commit_seconds or (1.0 if args.quick else 3.0)

    env = show_environment()
    results = [BrokerResults(spec) for spec in specs]
    started = time.monotonic()
    for scenario in SCENARIOS:
        if scenario not in scenarios:
            continue
        for r in results:
            if scenario == "failover":
                r.failover = attempt(r, scenario, lambda b: run_failover(b, trials))
            elif scenario == "rebalance":
                r.rebalance = attempt(r, scenario, lambda b: run_rebalance(b, cycles))
            else:
                r.commits = attempt(r, scenario, lambda b: run_commits(b, duration))
    print(f"(ran for {time.monotonic() - started:.0f} s)")

    sections: list[str] = []
    if "failover" in scenarios:
        sections += ["### Failover (a member killed)", "", render_failover(results), ""]
    if "rebalance" in scenarios:
        sections += [
            f"### Rebalance ({REBALANCE_MEMBERS} members, {REBALANCE_PARTITIONS} partitions)",
            "",
            render_rebalance(results),
            "",
        ]
    if "commits" in scenarios:
        sections += ["### Offset commits", "", render_commits(results), ""]
    failures = [
        f"{r.spec.name} {scenario}: {reason}"
        for r in results
        for scenario, reason in r.errors.items()
    ]
    publish(
        "groups",
        "Consumer groups",
        env,
        "\n".join(sections).rstrip(),
        [*notes(scenarios, trials, cycles, duration), *(f"FAILED {f}" for f in failures)],
        args.write_md,
        args.md_file,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
