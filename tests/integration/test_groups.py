"""Consumer groups and committed offsets (issue 3), with real clients in real processes.

Members are ``tests.integration.group_workers`` subprocesses (librdkafka, kafka-python,
aiokafka) that process, then commit, and journal what they do with one machine-wide
monotonic clock; the checks here read those journals. Waits poll a condition against a
deadline; nothing sleeps for correctness.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import kafka.errors as kafka_errors
import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.protocol.errors import ErrorCode
from headrace.testing import EmbeddedBroker, scaled
from tests.conftest import AnyBroker
from tests.integration.group_workers import WorkerProcess

SESSION_MS = 6000  # behaviour: the kill -9 test waits for a session to expire
HEARTBEAT_MS = 1000
# A rebalance after a member's death: its session expires, the survivors learn of the
# rebalance at their next heartbeat and rejoin. Generous for a loaded 2-core machine, and
# scaled() where used.
MOVE_MARGIN_S = 6.0
# The session of the static members that are restarted: a bound the restart (a new Python
# process joining) must beat, never waited out. Scaled where used.
STATIC_SESSION_MS = 20_000


# --- helpers -------------------------------------------------------------------------------


def wait_until(condition: Callable[[], Any], timeout: float, what: str,
               detail: Callable[[], str] = lambda: "") -> Any:
    """Poll ``condition`` until it returns something truthy; fail after
    ``scaled(timeout)``."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {scaled(timeout):g}s waiting for {what}\n{detail()}")
        time.sleep(0.05)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(scaled(10))


class Feed:
    """Produces numbered records round-robin over the partitions from a thread, until
    ``stop()``; remembers every acknowledged one: (partition, offset) -> value."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, per_round_s: float = 0.05):
        self.topic = topic
        self.partitions = partitions
        self.per_round_s = per_round_s
        self.acked: dict[tuple[int, int], str] = {}
        self.failed: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                   "acks": "all",
                                   "message.timeout.ms": int(scaled(20_000))})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._sent = 0

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        with self._lock:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.acked[(msg.partition(), msg.offset())] = msg.value().decode()

    def produce_round(self) -> None:
        """One record per partition."""
        for p in range(self.partitions):
            self._producer.produce(self.topic, value=f"r{self._sent}".encode(), partition=p,
                                   on_delivery=self._on_delivery)
            self._sent += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.produce_round()
            self._producer.poll(0)
            # Pacing (about 20 rounds a second), not synchronisation.
            self._stop.wait(self.per_round_s)

    def start(self) -> Feed:
        self._thread.start()
        return self

    def stop(self, check: bool = True) -> dict[tuple[int, int], str]:
        """Stop producing and wait for the outstanding acknowledgements. Idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(scaled(10))
        unacked = self._producer.flush(scaled(20))
        if check:
            assert unacked == 0, "records still unacknowledged"
            assert not self.failed, self.failed[:5]
        with self._lock:
            return dict(self.acked)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start group workers; every one still running is killed at the end of the test."""
    workers: list[WorkerProcess] = []

    def start(client: str, bootstrap: str, group: str, topic: str, name: str,
              **options: Any) -> WorkerProcess:
        options.setdefault("session_ms", SESSION_MS)
        options.setdefault("heartbeat_ms", HEARTBEAT_MS)
        w = WorkerProcess(client, bootstrap, group, topic, tmp_path, name, **options)
        workers.append(w)
        return w

    try:
        yield start
    finally:
        for w in workers:
            w.ensure_dead()


def describe(workers: list[WorkerProcess]) -> str:
    """For failure messages: each worker's latest group events and the tail of its log."""
    lines = []
    for w in workers:
        events = [e for e in w.events() if e["ev"] not in ("records", "committed")]
        lines.append(f"--- {w.name} ({w.client}, alive={w.alive()}): {events[-12:]}")
        log = w.log()
        if log:
            lines.append(log[-1500:])
    return "\n".join(lines)


# --- journal analysis ----------------------------------------------------------------------


def assignments_by_generation(workers: list[WorkerProcess]) -> dict[int, dict[str, set[int]]]:
    """generation -> member name -> partitions it owned after that generation's assignment."""
    gens: dict[int, dict[str, set[int]]] = defaultdict(dict)
    for w in workers:
        for e in w.events("assigned"):
            if e["gen"] is not None:
                gens[e["gen"]][w.name] = set(e["owned"])
    return gens


def settled(workers: list[WorkerProcess], members: list[WorkerProcess],
            partitions: int) -> int | None:
    """The latest generation if exactly ``members`` are in it, each owning at least one
    partition (and still owning what it was given), together owning every partition
    exactly once; else None."""
    gens = assignments_by_generation(workers)
    if not gens:
        return None
    latest = max(gens)
    assigned = gens[latest]
    if set(assigned) != {m.name for m in members}:
        return None
    if any(not parts or m.owned() != parts for m in members
           for parts in [assigned[m.name]]):
        return None
    owners = Counter(p for parts in assigned.values() for p in parts)
    if set(owners) != set(range(partitions)) or any(n != 1 for n in owners.values()):
        return None
    return latest


def ownership_intervals(w: WorkerProcess, end: float) -> dict[int, list[tuple[float, float]]]:
    """partition -> [(from, to)] during which ``w`` owned it. Ownership ends at a revoke,
    at ``closing`` (nothing is processed after it), at ``kill -9``, else at ``end``."""
    intervals: dict[int, list[tuple[float, float]]] = defaultdict(list)
    since: dict[int, float] = {}
    for e in w.events():
        if e["ev"] in ("assigned", "revoked"):
            now = set(e["owned"])
        elif e["ev"] == "closing":
            now = set()
        else:
            continue
        for p in now - since.keys():
            since[p] = e["t"]
        for p in set(since) - now:
            intervals[p].append((since.pop(p), e["t"]))
    stop = w.killed_at if w.killed_at is not None else end
    for p, t in since.items():
        intervals[p].append((t, stop))
    return intervals


def assert_exclusive_ownership(workers: list[WorkerProcess]) -> None:
    """No partition is ever owned by two members at once, and per generation the
    assignments are disjoint."""
    end = time.monotonic()
    timeline: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for w in workers:
        for p, owned in ownership_intervals(w, end).items():
            timeline[p] += [(a, b, w.name) for a, b in owned]
    for p, spans in timeline.items():
        spans.sort()
        for (_, end1, who1), (start2, _, who2) in itertools.pairwise(spans):
            assert start2 >= end1, (
                f"partition {p} owned by {who2} from {start2:.3f} while {who1} owned it "
                f"until {end1:.3f}")
    for gen, assigned in assignments_by_generation(workers).items():
        owners = Counter(p for parts in assigned.values() for p in parts)
        assert all(n == 1 for n in owners.values()), f"generation {gen}: {assigned}"


def processed(workers: list[WorkerProcess]) -> list[tuple[int, int, str, str, float]]:
    """Every processed record: (partition, offset, value, member, time)."""
    out = []
    for w in workers:
        for e in w.events("records"):
            out += [(p, o, v, w.name, e["t"]) for p, o, v in e["records"]]
    return out


def assert_complete_and_redelivered_only_after_commits(
        workers: list[WorkerProcess], acked: dict[tuple[int, int], str]) -> int:
    """Everything acknowledged was processed (with its value), and a record processed
    again had not been committed past: no commit above its offset was acknowledged before
    the partition was assigned to the member that processed it again. Returns the number
    of re-deliveries."""
    seen = processed(workers)
    values = {(p, o): v for p, o, v, _, _ in seen}
    missing = sorted(set(acked) - set(values))
    assert not missing, f"{len(missing)} records never processed, e.g. {missing[:10]}"
    wrong = [(k, v, values[k]) for k, v in acked.items() if values[k] != v]
    assert not wrong, f"records with the wrong value: {wrong[:10]}"
    commits: dict[int, list[tuple[float, int]]] = defaultdict(list)  # p -> [(time, offset)]
    assigned: dict[tuple[str, int], list[float]] = defaultdict(list)  # (member, p) -> times
    for w in workers:
        for e in w.events():
            if e["ev"] == "committed":
                for p, o in e["offsets"].items():
                    commits[int(p)].append((e["t"], o))
            elif e["ev"] == "assigned":
                for p in e["owned"]:
                    assigned[(w.name, p)].append(e["t"])
    deliveries: dict[tuple[int, int], list[tuple[float, str]]] = defaultdict(list)
    for p, o, _, who, t in seen:
        deliveries[(p, o)].append((t, who))
    bad = []
    for (p, o), times in deliveries.items():
        for t, who in sorted(times)[1:]:
            since = max(a for a in assigned[(who, p)] if a < t)
            before = max((c for ct, c in commits[p] if ct < since), default=0)
            if before > o:
                bad.append((p, o, who, before))
    assert not bad, ("re-delivered although a commit past it was acknowledged before the "
                     f"partition was assigned (partition, offset, member, commit): {bad[:10]}")
    return sum(len(v) - 1 for v in deliveries.values())


# --- 1. sharing partitions through joins, a clean leave and a kill -9 -----------------------


@pytest.mark.slow
@pytest.mark.parametrize("clients", [
    ("confluent", "confluent", "confluent", "confluent"),
    ("confluent", "kafka-python", "aiokafka", "confluent"),
], ids=["librdkafka", "mixed"])
def test_members_share_partitions_through_join_leave_and_kill_9(
        broker: EmbeddedBroker, topic_name: str, spawn: Callable[..., WorkerProcess],
        tmp_path: Path, clients: tuple[str, str, str, str]) -> None:
    bootstrap, partitions, group = broker.bootstrap_servers, 6, f"g-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic_name, partitions)
    feed = Feed(bootstrap, topic_name, partitions).start()
    try:
        hold_file = tmp_path / "c-holds"
        a, b = (spawn(client, bootstrap, group, topic_name, name)
                for client, name in zip(clients, "ab", strict=False))
        c = spawn(clients[2], bootstrap, group, topic_name, "c", hold_file=hold_file)
        everyone = [a, b, c]
        wait_until(lambda: settled(everyone, [a, b, c], partitions), 30,
                   "3 members to share the partitions", lambda: describe(everyone))

        d = spawn(clients[3], bootstrap, group, topic_name, "d")
        everyone.append(d)
        wait_until(lambda: settled(everyone, [a, b, c, d], partitions), 30,
                   "the 4th member to get partitions", lambda: describe(everyone))

        assert b.stop() == 0, b.log()
        wait_until(lambda: settled(everyone, [a, c, d], partitions), 30,
                   "the partitions of the member that left to move", lambda: describe(everyone))

        # c stops right after processing a batch, before committing it; then kill -9.
        victim_partitions = c.owned()
        hold_file.touch()
        wait_until(lambda: c.events("holding"), 10, "c to process a batch",
                   lambda: describe(everyone))
        c.kill()
        held = {(p, o) for e in c.events("records")[-1:] for p, o, _ in e["records"]}
        survivors = [a, d]
        wait_until(lambda: settled(everyone, survivors, partitions),
                   SESSION_MS / 1000 + MOVE_MARGIN_S + 5,  # (scaled by wait_until)
                   "the partitions of the killed member to move", lambda: describe(everyone))
        assert c.killed_at is not None
        moved_at = max(
            min(e["t"] for w in survivors for e in w.events("assigned")
                if e["t"] > c.killed_at and p in e["owned"])
            for p in victim_partitions)
        # Behaviour, not speed: the move follows the session expiry (a sweep much later,
        # or none, fails); the margin for the rejoin is the machine's, so it is scaled.
        assert moved_at - c.killed_at <= SESSION_MS / 1000 + scaled(MOVE_MARGIN_S), (
            f"partitions moved {moved_at - c.killed_at:.1f}s after kill -9")

        # Keep producing a little after the last move, then drain everything.
        target = feed.count() + 3 * partitions
        wait_until(lambda: feed.count() >= target, 10, "more records to be produced")
        acked = feed.stop()
        wait_until(lambda: set(acked) <= {(p, o) for p, o, *_ in processed(everyone)}, 30,
                   "every record to be processed", lambda: describe(everyone))
        for w in survivors:
            assert w.stop() == 0, w.log()
    finally:
        feed.stop(check=False)

    assert_exclusive_ownership(everyone)
    assert_complete_and_redelivered_only_after_commits(everyone, acked)
    # What c processed but never committed was processed again by a survivor.
    assert held
    again = {(p, o) for p, o, _, who, _ in processed(survivors)}
    assert held <= again, sorted(held - again)[:10]
    assert not any(w.events("client_error") for w in everyone), describe(everyone)


# --- 2. fan-out: two groups read one topic independently ------------------------------------


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """OffsetFetch through confluent-kafka's AdminClient: (topic, partition) -> offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(scaled(10))
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def end_offsets(acked: dict[tuple[int, int], str], topic: str) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for p, o in acked:
        ends[(topic, p)] = max(ends.get((topic, p), 0), o + 1)
    return ends


def test_two_groups_each_see_everything(broker: EmbeddedBroker, topic_name: str,
                                        spawn: Callable[..., WorkerProcess]) -> None:
    bootstrap, partitions = broker.bootstrap_servers, 3
    create_topic(bootstrap, topic_name, partitions)
    feed = Feed(bootstrap, topic_name, partitions).start()
    g1, g2 = f"fan-1-{uuid.uuid4().hex[:6]}", f"fan-2-{uuid.uuid4().hex[:6]}"
    try:
        groups = {
            g1: [spawn("confluent", bootstrap, g1, topic_name, "g1-a"),
                 spawn("confluent", bootstrap, g1, topic_name, "g1-b")],
            g2: [spawn("kafka-python", bootstrap, g2, topic_name, "g2-a"),
                 spawn("aiokafka", bootstrap, g2, topic_name, "g2-b")],
        }
        for members in groups.values():
            wait_until(partial(settled, members, members, partitions), 30,
                       "both members of each group to get partitions",
                       partial(describe, members))
        target = feed.count() + 10 * partitions
        wait_until(lambda: feed.count() >= target, 10, "records to be produced")
        acked = feed.stop()

        def saw_everything(members: list[WorkerProcess]) -> bool:
            return set(acked) <= {(p, o) for p, o, *_ in processed(members)}

        def committed_everything(group: str) -> bool:
            return committed_offsets(bootstrap, group) == end_offsets(acked, topic_name)

        for group, members in groups.items():
            wait_until(partial(saw_everything, members), 30, f"{group} to process every record",
                       partial(describe, members))
            assert_complete_and_redelivered_only_after_commits(members, acked)
            # Commit-after-process: each group's committed offsets reach the end.
            wait_until(partial(committed_everything, group), 10,
                       f"{group} to commit everything")
    finally:
        feed.stop(check=False)


# --- 3. committed offsets survive a broker restart ------------------------------------------


def produce_numbered(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(scaled(20)) == 0


def group_consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                     **extra})


def consume_until(consumer: Consumer, done: Callable[[dict[int, list[int]]], bool],
                  timeout: float = 30.0) -> dict[int, list[int]]:
    """Poll a subscribed consumer until ``done(partition -> offsets seen)``."""
    seen: dict[int, list[int]] = defaultdict(list)
    deadline = time.monotonic() + scaled(timeout)
    while not done(seen):
        assert time.monotonic() < deadline, f"consumed only {dict(seen)}"
        for msg in consumer.consume(100, 0.2):
            partition, offset = msg.partition(), msg.offset()
            assert msg.error() is None and partition is not None and offset is not None
            seen[partition].append(offset)
    return seen


@pytest.mark.parametrize("how", ["stop", "kill-9"])
def test_committed_offsets_survive_a_broker_restart(tmp_path: Path, how: str) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient

    topic, group, partitions, n = "orders", "restart-group", 3, 20
    committed = {0: 5, 1: 12, 2: 20}
    broker = EmbeddedBroker(data_dir=tmp_path / "data").start()
    try:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, topic, partitions)
        produce_numbered(bootstrap, topic, partitions, n)
        # A member of the group commits from inside its generation.
        consumer = group_consumer(bootstrap, group)
        try:
            consumer.subscribe([topic])
            consume_until(consumer, lambda seen: sum(map(len, seen.values())) == partitions * n)
            consumer.commit(offsets=[TopicPartition(topic, p, o, f"meta-{p}")
                                     for p, o in committed.items()], asynchronous=False)
        finally:
            consumer.close()

        if how == "stop":
            assert broker.stop() == 0
        else:
            broker.kill()
        broker.start()

        expected = {(topic, p): o for p, o in committed.items()}
        assert committed_offsets(bootstrap, group) == expected
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            fetched = admin.list_group_offsets(group)[group]
            # (confluent-kafka commits the metadata's C string with its NUL terminator.)
            assert {(tp.topic, tp.partition): (om.offset, om.metadata.rstrip("\x00"))
                    for tp, om in fetched.items()} == {
                (topic, p): (o, f"meta-{p}") for p, o in committed.items()}
            assert group in {g["group_id"] for g in admin.list_groups()}
        finally:
            admin.close()
        kp = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                           enable_auto_commit=False)
        try:
            assert {p: kp.committed(KpTopicPartition(topic, p))
                    for p in range(partitions)} == committed
        finally:
            kp.close()

        # A new member of the group resumes exactly where the commits say.
        resumed = group_consumer(bootstrap, group)
        resumed.subscribe([topic])
        try:
            seen = consume_until(resumed, lambda s: sum(map(len, s.values())) >=
                                 sum(n - o for o in committed.values()))
        finally:
            resumed.close()
        assert {p: seen.get(p, []) for p in range(partitions)} == {
            p: list(range(o, n)) for p, o in committed.items()}
    finally:
        broker.stop()


# --- 4. cooperative-sticky: unaffected partitions stay through a rebalance --------------------


def covered(members: list[WorkerProcess], partitions: int) -> bool:
    """Every member owns something; together they own every partition exactly once."""
    owned = [m.owned() for m in members]
    return all(owned) and sorted(p for o in owned for p in o) == list(range(partitions))


@pytest.mark.slow
@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_cooperative_sticky_keeps_unmoved_partitions_through_a_join(
        broker: EmbeddedBroker, topic_name: str, spawn: Callable[..., WorkerProcess],
        client: str) -> None:
    bootstrap, partitions, group = broker.bootstrap_servers, 6, f"coop-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic_name, partitions)
    before_join, after_join = (Feed(bootstrap, topic_name, partitions) for _ in range(2))
    try:
        before_join.start()
        a = spawn(client, bootstrap, group, topic_name, "a", strategy="cooperative-sticky")
        b = spawn(client, bootstrap, group, topic_name, "b", strategy="cooperative-sticky")
        everyone = [a, b]
        wait_until(lambda: covered([a, b], partitions), 30, "a and b to share the partitions",
                   lambda: describe(everyone))
        # Quiet during the rebalance: a commit racing it can get ILLEGAL_GENERATION (Kafka
        # answers the same), which librdkafka treats as losing every partition.
        acked = before_join.stop()
        wait_until(lambda: committed_offsets(bootstrap, group) == end_offsets(
            acked, topic_name), 30, "a and b to commit everything", lambda: describe(everyone))
        before = {w.name: w.owned() for w in (a, b)}
        joined_at = time.monotonic()
        c = spawn(client, bootstrap, group, topic_name, "c", strategy="cooperative-sticky")
        everyone.append(c)
        wait_until(lambda: covered(everyone, partitions) and len(c.owned()) == 2, 30,
                   "c to get its share", lambda: describe(everyone))
        for w in (a, b):
            revoked_events = [e for e in w.events("revoked") if e["t"] > joined_at]
            revoked = {p for e in revoked_events for p in e["partitions"]}
            assert not any(e["lost"] for e in revoked_events), describe(everyone)
            # a and b only give partitions up, and revoke exactly those: the ones they keep
            # are never revoked, not even for a moment.
            assert w.owned() <= before[w.name], describe(everyone)
            assert revoked == before[w.name] - w.owned(), describe(everyone)
        assert c.owned() == (before["a"] - a.owned()) | (before["b"] - b.owned())
        # And then everyone consumes.
        after_join.start()
        target = after_join.count() + 5 * partitions
        wait_until(lambda: after_join.count() >= target, 10, "more records to be produced")
        acked |= after_join.stop()
        wait_until(lambda: set(acked) <= {(p, o) for p, o, *_ in processed(everyone)}, 30,
                   "every record to be processed", lambda: describe(everyone))
        for w in everyone:
            assert w.stop() == 0, w.log()
    finally:
        before_join.stop(check=False)
        after_join.stop(check=False)
    assert_exclusive_ownership(everyone)
    assert_complete_and_redelivered_only_after_commits(everyone, acked)


# --- 5. every assignor of every client: full coverage, no overlap ---------------------------


def describe_group(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(scaled(10))


@pytest.mark.parametrize(("client", "strategy"), [
    ("confluent", "range"), ("confluent", "roundrobin"),
    ("kafka-python", "range"), ("kafka-python", "roundrobin"), ("kafka-python", "sticky"),
    ("aiokafka", "range"), ("aiokafka", "roundrobin"), ("aiokafka", "sticky"),
])
def test_assignor_covers_every_partition_once(
        broker: EmbeddedBroker, topic_name: str, spawn: Callable[..., WorkerProcess],
        client: str, strategy: str) -> None:
    bootstrap, partitions, group = broker.bootstrap_servers, 5, f"as-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic_name, partitions)
    members = [spawn(client, bootstrap, group, topic_name, f"m{i}", strategy=strategy)
               for i in range(3)]
    wait_until(lambda: settled(members, members, partitions), 30,
               "three members to share five partitions", lambda: describe(members))
    description = describe_group(bootstrap, group)
    assert description.partition_assignor == strategy
    assert description.state == ConsumerGroupState.STABLE
    assert {m.member_id: {tp.partition for tp in m.assignment.topic_partitions}
            for m in description.members} == {
        w.events("assigned")[-1]["member"]: w.owned() for w in members}
    assert members[0].stop() == 0
    wait_until(lambda: settled(members, members[1:], partitions), 30,
               "the two others to take over", lambda: describe(members))
    assert_exclusive_ownership(members)


# --- 6. static membership --------------------------------------------------------------------


def static_session() -> dict[str, int]:
    """Worker options of the restarted static members: the scaled session, and a
    max.poll.interval (the rebalance timeout) as long (librdkafka wants it no shorter)."""
    ms = int(scaled(STATIC_SESSION_MS))
    return {"session_ms": ms, "rebalance_ms": max(ms, 10_000)}


@pytest.mark.parametrize("clients", [
    ("confluent", "confluent", "confluent"),
    ("confluent", "kafka-python", "aiokafka"),
], ids=["librdkafka", "mixed"])
def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
        broker: EmbeddedBroker, topic_name: str, spawn: Callable[..., WorkerProcess],
        clients: tuple[str, str, str]) -> None:
    bootstrap, partitions, group = broker.bootstrap_servers, 6, f"st-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic_name, partitions)
    feed = Feed(bootstrap, topic_name, partitions)

    def member(i: int, name: str) -> WorkerProcess:
        return spawn(clients[i], bootstrap, group, topic_name, name, instance_id=f"static-{i}",
                     **static_session())

    try:
        # static-0 first, so that it leads; the others are the ones restarted (the
        # restarted leader has its own test below).
        first = member(0, "s0")
        wait_until(first.owned, 30, "the first member to get partitions", first.log)
        current = [first, member(1, "s1"), member(2, "s2")]
        everyone = list(current)
        wait_until(lambda: settled(everyone, current, partitions), 30,
                   "three static members to share the partitions", lambda: describe(everyone))
        generation = max(assignments_by_generation(everyone))
        settled_at = time.monotonic()
        for i in (1, 2) if clients[1] != clients[2] else (1,):
            old = current[i]
            before = old.owned()
            old.kill()
            assert old.killed_at is not None
            new = member(i, f"s{i}-restarted")
            everyone.append(new)
            current[i] = new
            wait_until(new.owned, STATIC_SESSION_MS / 1000, "the restarted member to get "
                       "partitions back within the session timeout", lambda: describe(everyone))
            back = new.events("assigned")[-1]
            assert (set(back["owned"]), back["gen"]) == (before, generation)
        # Records keep flowing to every member, and nobody was revoked on the way.
        feed.start()
        target = feed.count() + 5 * partitions
        wait_until(lambda: feed.count() >= target, 10, "records to be produced")
        acked = feed.stop()
        wait_until(lambda: set(acked) <= {(p, o) for p, o, *_ in processed(current)}, 30,
                   "the members to process every record", lambda: describe(everyone))
        for w in current:
            changes = [e for e in w.events() if e["t"] > settled_at and (
                (e["ev"] == "revoked" and e["partitions"])
                or (e["ev"] == "assigned" and e["gen"] != generation))]
            assert not changes, describe(everyone)
    finally:
        feed.stop(check=False)


def test_a_restarted_static_leader_gets_its_partitions_back_without_a_rebalance(
        any_broker: AnyBroker, topic_name: str,
        spawn: Callable[..., WorkerProcess]) -> None:
    """Issue 21 (librdkafka 0102_static_group_rebalance): the leader restarts under its
    instance id; Kafka hands its assignment back without a rebalance (the follower sees no
    revoke and no assignment), on both brokers."""
    bootstrap, partitions, group = any_broker.bootstrap_servers, 4, f"sl-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic_name, partitions)

    def member(i: int, name: str) -> WorkerProcess:
        return spawn("confluent", bootstrap, group, topic_name, name, instance_id=f"static-{i}",
                     **static_session())

    leader = member(0, "s0")  # joins first, so it leads
    wait_until(leader.owned, 30, "the first member to get partitions", leader.log)
    follower = member(1, "s1")
    everyone = [leader, follower]
    wait_until(lambda: settled(everyone, everyone, partitions), 30,
               "two static members to share the partitions", lambda: describe(everyone))
    generation = max(assignments_by_generation(everyone))
    before, settled_at = leader.owned(), time.monotonic()
    leader.kill()
    restarted = member(0, "s0-restarted")
    everyone.append(restarted)
    wait_until(restarted.owned, STATIC_SESSION_MS / 1000, "the restarted leader to get "
               "partitions back within the session timeout", lambda: describe(everyone))
    back = restarted.events("assigned")[-1]
    assert (set(back["owned"]), back["gen"]) == (before, generation), describe(everyone)
    # Give a rebalance, had one started, time to reach the follower (its heartbeats are
    # HEARTBEAT_MS apart), then check that nothing happened to it.
    time.sleep(3 * HEARTBEAT_MS / 1000)
    changes = [e for e in follower.events() if e["t"] > settled_at and (
        e["ev"] in ("revoked", "assigned"))]
    assert not changes, describe(everyone)
    assert restarted.events("assigned") == [back], describe(everyone)


def test_a_group_of_closed_static_members_can_be_deleted_right_after_their_sessions(
        broker: EmbeddedBroker, topic_name: str) -> None:
    """Issue 21 (librdkafka 0081): static members leave no LeaveGroup when they close, so
    the group empties when their sessions expire; DeleteGroups half a second after that
    succeeds (the sessions are expired at their deadline, not a periodic sweep later)."""
    create_topic(broker.bootstrap_servers, topic_name, 2)
    group = f"del-{uuid.uuid4().hex[:8]}"
    consumers = [Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                           "group.instance.id": f"static-{i}", "session.timeout.ms": 3000,
                           "heartbeat.interval.ms": 500}) for i in range(2)]
    for c in consumers:
        c.subscribe([topic_name])

    def assigned() -> bool:
        for c in consumers:
            c.poll(0.05)
        return all(c.assignment() for c in consumers)

    wait_until(assigned, 30, "both static members to get partitions")
    for c in consumers:
        c.close()
    closed = time.monotonic()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    # An upper bound on the wait, not a measurement: 3 s sessions (behaviour), then 0.5 s
    # of margin for the broker to act on its deadline (the machine's: scaled).
    time.sleep(max(0.0, closed + 3.0 + scaled(0.5) - time.monotonic()))
    admin.delete_consumer_groups([group])[group].result(scaled(10))
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(scaled(10)).valid}


# --- 7. bad input through the real protocol ---------------------------------------------------

JOIN_V, SYNC_V, HEARTBEAT_V, COMMIT_V, LEAVE_V, DESCRIBE_V, LIST_V = 5, 3, 3, 8, 3, 5, 4


def subscription(topic: str) -> bytes:
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    return bytes(ConsumerProtocolSubscription(topics=[topic], user_data=None).encode(version=0))


def assignment(topic: str, partitions: list[int]) -> bytes:
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as A

    return bytes(A(assigned_partitions=[A.TopicPartition(topic=topic, partitions=partitions)],
                   user_data=None).encode(version=0))


def assigned_partitions(raw: bytes) -> list[int]:
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    decoded = ConsumerProtocolAssignment.decode(raw, version=0)
    return sorted(p for t in decoded.assigned_partitions for p in t.partitions)


class RawMember:
    """A group member speaking the protocol by hand over one socket (kafka-python codec)."""

    def __init__(self, bootstrap: str, group: str, protocols: list[tuple[str, bytes]]) -> None:
        from tests.integration.rawclient import RawClient

        self.bootstrap, self.group, self.protocols = bootstrap, group, protocols
        self.client = RawClient(bootstrap, timeout=30)
        self.member_id, self.generation = "", -1

    def join_request(self, member_id: str, protocols: list[tuple[str, bytes]] | None = None,
                     group: str | None = None) -> Any:
        from kafka.protocol.consumer import JoinGroupRequest

        return JoinGroupRequest(
            # Bounds the test's own pace must beat (it heartbeats rarely, rejoins late):
            # generous and scaled.
            group_id=group or self.group, session_timeout_ms=int(scaled(60_000)),
            rebalance_timeout_ms=int(scaled(60_000)), member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m)
                       for n, m in (protocols or self.protocols)])

    def join(self) -> Any:
        """JoinGroup (after KIP-394's MEMBER_ID_REQUIRED for a new member); blocks until
        the rebalance completes."""
        if not self.member_id:
            r = self.client.request(self.join_request(""), JOIN_V)
            assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED, r
            self.member_id = r.member_id
        r = self.client.request(self.join_request(self.member_id), JOIN_V)
        assert r.error_code == 0, r
        self.generation = r.generation_id
        return r

    def sync(self, assignments: dict[str, bytes] | None = None,
             generation: int | None = None) -> Any:
        from kafka.protocol.consumer import SyncGroupRequest

        return self.client.request(SyncGroupRequest(
            group_id=self.group,
            generation_id=self.generation if generation is None else generation,
            member_id=self.member_id, group_instance_id=None,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in (assignments or {}).items()]), SYNC_V)

    def join_and_sync(self, timeout: float = 30.0) -> bytes:
        """Join and sync as a real client would: start over on REBALANCE_IN_PROGRESS or a
        dropped connection (reconnecting). Returns this member's assignment."""
        from tests.integration.rawclient import RawClient

        deadline = time.monotonic() + scaled(timeout)
        while True:
            assert time.monotonic() < deadline, "could not join the group"
            try:
                joined = self.join()
                plan = None
                if joined.leader == self.member_id:
                    topic_partitions = [m.member_id for m in joined.members]
                    plan = {m: b"" for m in topic_partitions}
                r = self.sync(plan)
            except ConnectionError:
                self.client.close()
                self.client = RawClient(self.bootstrap, timeout=30)
                continue
            if r.error_code == 0:
                return bytes(r.assignment)
            assert r.error_code == ErrorCode.REBALANCE_IN_PROGRESS, r

    def heartbeat(self, group: str | None = None, member_id: str | None = None,
                  generation: int | None = None) -> int:
        from kafka.protocol.consumer import HeartbeatRequest

        r = self.client.request(HeartbeatRequest(
            group_id=group or self.group,
            generation_id=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=None), HEARTBEAT_V)
        return int(r.error_code)

    def commit(self, topic: str, offsets: dict[int, int], metadata: str = "",
               member_id: str | None = None, generation: int | None = None) -> dict[int, int]:
        """OffsetCommit; returns partition -> error code."""
        from kafka.protocol.consumer import OffsetCommitRequest as R

        T = R.OffsetCommitRequestTopic
        r = self.client.request(R(
            group_id=self.group,
            generation_id_or_member_epoch=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=None,
            topics=[T(name=topic, partitions=[T.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                committed_metadata=metadata) for p, o in offsets.items()])]), COMMIT_V)
        return {p.partition_index: int(p.error_code) for t in r.topics for p in t.partitions}

    def leave(self) -> int:
        from kafka.protocol.consumer import LeaveGroupRequest

        r = self.client.request(LeaveGroupRequest(group_id=self.group, members=[
            LeaveGroupRequest.MemberIdentity(member_id=self.member_id, group_instance_id=None)]),
            LEAVE_V)
        return int(r.members[0].error_code)

    def close(self) -> None:
        self.client.close()


def group_states(bootstrap: str) -> dict[str, str]:
    from kafka.protocol.admin import ListGroupsRequest

    from tests.integration.rawclient import RawClient

    with RawClient(bootstrap) as c:
        r = c.request(ListGroupsRequest(states_filter=[]), LIST_V)
    return {g.group_id: g.group_state for g in r.groups}


def test_bad_group_requests_get_their_error_codes_and_the_group_keeps_working(
        broker: EmbeddedBroker, topic_name: str, spawn: Callable[..., WorkerProcess]) -> None:
    from kafka.admin import KafkaAdminClient

    bootstrap, group = broker.bootstrap_servers, f"bad-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic_name, 2)
    w = spawn("confluent", bootstrap, group, topic_name, "w")
    wait_until(lambda: settled([w], [w], 2), 30, "the consumer to own both partitions", w.log)
    first_generation = w.events("assigned")[-1]["gen"]
    w_member = w.events("assigned")[-1]["member"]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    sent = 0

    def still_consuming() -> None:
        """A new record in each partition the consumer owns reaches it."""
        nonlocal sent
        values = set()
        for p in w.owned():
            sent += 1
            values.add(f"probe-{sent}")
            producer.produce(topic_name, value=f"probe-{sent}".encode(), partition=p)
        assert producer.flush(scaled(10)) == 0
        wait_until(lambda: values <= {v for _, _, v, _, _ in processed([w])}, 20,
                   f"the consumer to receive {sorted(values)}", w.log)

    raw = RawMember(bootstrap, group, [("range", subscription(topic_name))])
    try:
        # Unknown group, unknown member.
        assert raw.heartbeat(group=f"no-such-{uuid.uuid4().hex[:6]}", member_id="x",
                             generation=1) == ErrorCode.UNKNOWN_MEMBER_ID
        still_consuming()
        assert raw.commit(topic_name, {0: 0}, member_id="nobody",
                          generation=first_generation) == {0: ErrorCode.UNKNOWN_MEMBER_ID}
        still_consuming()
        # 2 MB of member metadata, as a new member and as the live one.
        huge = [("range", b"\x00" * (2 * 1024 * 1024))]
        for member_id in ("", w_member):
            r = raw.client.request(raw.join_request(member_id, huge), JOIN_V)
            assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert group_states(bootstrap)[group] == "Stable"
        still_consuming()
        assert w.events("assigned")[-1]["gen"] == first_generation, "refused joins rebalanced"

        # The raw client joins as a second member: a rebalance, then two members.
        mine = assigned_partitions(raw.join_and_sync())
        wait_until(lambda: settled([w], [w], 2) is None and len(w.owned()) == 1
                   and w.events("assigned")[-1]["gen"] == raw.generation, 30,
                   "the consumer to give up a partition", w.log)
        assert mine == sorted({0, 1} - w.owned())
        assert raw.heartbeat() == 0
        bad = raw.sync(generation=raw.generation + 1)
        assert bad.error_code == ErrorCode.ILLEGAL_GENERATION
        still_consuming()
        # A commit from the fenced first generation (the consumer's own, zombie-style),
        # and from this member with a generation that is not the group's.
        (p,) = mine
        assert raw.commit(topic_name, {p: 0}, member_id=w_member,
                          generation=first_generation) == {p: ErrorCode.ILLEGAL_GENERATION}
        assert raw.commit(topic_name, {p: 0}, generation=first_generation) == {
            p: ErrorCode.ILLEGAL_GENERATION}
        still_consuming()
        # Offset metadata: 4096 bytes is the limit.
        position = committed_offsets(bootstrap, group).get((topic_name, p), 0)
        assert raw.commit(topic_name, {p: position}, metadata="m" * 4097) == {
            p: ErrorCode.OFFSET_METADATA_TOO_LARGE}
        assert raw.commit(topic_name, {p: position}, metadata="m" * 4096) == {p: 0}
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            fetched = admin.list_group_offsets(group)[group]
        finally:
            admin.close()
        from kafka import TopicPartition as KpTopicPartition

        assert fetched[KpTopicPartition(topic_name, p)].metadata == "m" * 4096
        still_consuming()
        # Leaving hands the partition back; the consumer resumes where the commit says.
        assert raw.leave() == 0
        wait_until(lambda: w.owned() == {0, 1}, 30, "the consumer to own both again", w.log)
        assert raw.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID
        still_consuming()
    finally:
        raw.close()
    assert not w.events("client_error"), w.events("client_error")


def test_the_last_consumer_in_a_group_takes_every_partition(
        broker: EmbeddedBroker, topic_name: str, spawn: Callable[..., WorkerProcess]) -> None:
    bootstrap, group = broker.bootstrap_servers, f"last-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic_name, 2)
    a = spawn("confluent", bootstrap, group, topic_name, "a")
    b = spawn("confluent", bootstrap, group, topic_name, "b")
    wait_until(lambda: settled([a, b], [a, b], 2), 30, "a and b to share the partitions",
               lambda: describe([a, b]))
    assert b.stop() == 0
    # About one heartbeat interval plus a rebalance. (With the join_future bug this was a
    # livelock: a's own rejoin completed the rebalance inline, the handler died, a
    # reconnected and rejoined as leader, which started the next rebalance, and so on.)
    wait_until(lambda: settled([a, b], [a], 2), 15, "a to take every partition",
               lambda: describe([a, b]))


def test_a_lone_member_rejoining_gets_a_new_generation(broker: EmbeddedBroker,
                                                       topic_name: str) -> None:
    """Its own JoinGroup completes the rebalance inline; it still gets the response (the
    join_future bug closed the connection instead)."""
    raw = RawMember(broker.bootstrap_servers, f"lone-{uuid.uuid4().hex[:8]}",
                    [("range", subscription(topic_name))])
    try:
        raw.join_and_sync()
        assert raw.generation == 1
        r = raw.client.request(raw.join_request(raw.member_id), JOIN_V)
        assert (r.error_code, r.generation_id, r.leader) == (0, 2, raw.member_id)
    finally:
        raw.close()


@pytest.mark.parametrize("request_kind", ["DescribeGroups", "OffsetDelete"])
def test_a_group_switching_protocol_can_be_described(broker: EmbeddedBroker, topic_name: str,
                                                      request_kind: str) -> None:
    from kafka.protocol.admin import DescribeGroupsRequest
    from kafka.protocol.consumer import OffsetDeleteRequest

    from tests.integration.rawclient import RawClient

    bootstrap, group = broker.bootstrap_servers, f"switch-{uuid.uuid4().hex[:8]}"
    sub = subscription(topic_name)
    a = RawMember(bootstrap, group, [("range", sub), ("roundrobin", sub)])
    b = RawMember(bootstrap, group, [("roundrobin", sub)])
    joined: list[Any] = []
    thread = threading.Thread(target=lambda: joined.append(b.join()), daemon=True)
    try:
        a.join_and_sync()  # alone: generation 1 with protocol "range"
        thread.start()  # b only speaks roundrobin; the group rebalances, waiting for a
        wait_until(lambda: group_states(bootstrap).get(group) == "PreparingRebalance", 10,
                   "the rebalance to start")
        with RawClient(bootstrap) as c:
            if request_kind == "DescribeGroups":
                r = c.request(DescribeGroupsRequest(groups=[group],
                                                    include_authorized_operations=False),
                              DESCRIBE_V)
                assert r.groups[0].group_state == "PreparingRebalance"
            else:
                T = OffsetDeleteRequest.OffsetDeleteRequestTopic
                r = c.request(OffsetDeleteRequest(group_id=group, topics=[T(
                    name=topic_name, partitions=[T.OffsetDeleteRequestPartition(
                        partition_index=0)])]), 0)
                assert r.topics[0].partitions[0].error_code == \
                    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    finally:
        a.leave()  # b's join then completes: it is alone
        thread.join(scaled(15))
        if joined:
            b.leave()
        a.close()
        b.close()


# --- 8. ListGroups, DescribeGroups, DeleteGroups, OffsetDelete through admin clients -----------


def admin_error_code(future: Any) -> int:
    """The Kafka error code a confluent-kafka admin future failed with (0 if it did not)."""
    try:
        future.result(scaled(10))
    except KafkaException as e:
        return int(e.args[0].code())
    return 0


def test_admin_clients_list_describe_and_delete_groups_and_offsets(
        tmp_path: Path, spawn: Callable[..., WorkerProcess]) -> None:
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    topic, other, partitions = "events", "other-topic", 3
    group, simple = "live-group", "simple-group"
    broker = EmbeddedBroker(data_dir=tmp_path / "data").start()
    kp: KafkaAdminClient | None = None
    try:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, topic, partitions)
        create_topic(bootstrap, other, 1)
        produce_numbered(bootstrap, topic, partitions, 10)
        ends = {(topic, p): 10 for p in range(partitions)}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        kp = KafkaAdminClient(bootstrap_servers=bootstrap)
        members = [spawn("confluent", bootstrap, group, topic, f"m{i}") for i in range(2)]
        wait_until(lambda: settled(members, members, partitions), 30, "the group to settle",
                   lambda: describe(members))
        wait_until(lambda: committed_offsets(bootstrap, group) == ends, 20,
                   "the members to commit everything")
        # A groupless ("simple") commit, also to a topic the live group does not read.
        assert kp.alter_group_offsets(simple, {
            KpTopicPartition(topic, 0): OffsetAndMetadata(3, "s", -1)}) == {
            KpTopicPartition(topic, 0): kafka_errors.NoError}
        assert kp.alter_group_offsets(group, {
            KpTopicPartition(other, 0): OffsetAndMetadata(0, "", -1)}) == {
            KpTopicPartition(other, 0): kafka_errors.UnknownMemberIdError}, \
            "only members commit to a group with members"

        # --- while members are live
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(scaled(10)).valid}
        assert listed[group].state == ConsumerGroupState.STABLE
        assert listed[simple].state == ConsumerGroupState.EMPTY
        assert {g["group_id"]: g["group_state"] for g in kp.list_groups()} == {
            group: "Stable", simple: "Empty"}
        assert [g["group_id"] for g in kp.list_groups(states_filter=["Stable"])] == [group]
        d = describe_group(bootstrap, group)
        assert (d.state, d.partition_assignor, len(d.members)) == (
            ConsumerGroupState.STABLE, "range", 2)
        assert sorted(tp.partition for m in d.members
                      for tp in m.assignment.topic_partitions) == list(range(partitions))
        kd = kp.describe_groups([group])[group]
        assert (kd["group_state"], kd["protocol_type"], kd["protocol_data"]) == (
            "Stable", "consumer", "range")
        assert {m["member_id"] for m in kd["members"]} == {m.member_id for m in d.members}
        assert all(m["member_metadata"]["topics"] == [topic] for m in kd["members"])
        assert admin_error_code(admin.delete_consumer_groups([group])[group]) == \
            ErrorCode.NON_EMPTY_GROUP
        assert kp.delete_groups([group]) == {group: "NonEmptyGroupError"}
        assert admin_error_code(admin.delete_consumer_groups(["no-such-group"])[
            "no-such-group"]) == ErrorCode.GROUP_ID_NOT_FOUND
        assert kp.delete_group_offsets(group, [KpTopicPartition(topic, 0)]) == {
            KpTopicPartition(topic, 0): kafka_errors.GroupSubscribedToTopicError}
        altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, 0, 1)])])[group]
        try:
            codes = [tp.error.code() for tp in altered.result(scaled(10)).topic_partitions]
        except KafkaException as e:
            codes = [e.args[0].code()]
        assert codes == [ErrorCode.UNKNOWN_MEMBER_ID]
        assert committed_offsets(bootstrap, group) == ends

        # --- the members leave: the group is Empty and its offsets are editable
        for m in members:
            assert m.stop() == 0, m.log()
        wait_until(lambda: describe_group(bootstrap, group).state == ConsumerGroupState.EMPTY,
                   10, "the group to be empty")
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, 0, 1), TopicPartition(other, 0, 0)])])[group].result(
                scaled(10))
        assert committed_offsets(bootstrap, group) == {**ends, (topic, 0): 1, (other, 0): 0}
        assert kp.delete_group_offsets(group, [KpTopicPartition(topic, 1)]) == {
            KpTopicPartition(topic, 1): kafka_errors.NoError}
        left = {**ends, (topic, 0): 1, (other, 0): 0}
        del left[(topic, 1)]
        assert committed_offsets(bootstrap, group) == left
        with pytest.raises(kafka_errors.GroupIdNotFoundError):
            kp.delete_group_offsets("no-such-group", [KpTopicPartition(topic, 0)])

        # Deleting removes the group and its offsets, for good.
        admin.delete_consumer_groups([group])[group].result(scaled(10))
        assert kp.delete_groups([simple]) == {simple: "OK"}
        assert committed_offsets(bootstrap, group) == {}
        assert kp.list_group_offsets(simple)[simple] == {}
        assert {g["group_id"] for g in kp.list_groups()} == set()
        assert admin_error_code(admin.delete_consumer_groups([group])[group]) == \
            ErrorCode.GROUP_ID_NOT_FOUND
        kp.close()
        kp = None

        broker.kill()
        broker.start()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert admin.list_consumer_groups().result(scaled(10)).valid == []
        assert committed_offsets(bootstrap, group) == {}
        assert committed_offsets(bootstrap, simple) == {}
        assert describe_group(bootstrap, group).state == ConsumerGroupState.DEAD
    finally:
        if kp is not None:
            kp.close()
        broker.stop()
