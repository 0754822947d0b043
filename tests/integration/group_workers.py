"""Consumer-group members for multi-process tests, one per real client library.

Run from the repository root::

    python -m tests.integration.group_workers confluent|kafka-python|aiokafka \\
        --bootstrap HOST:PORT --group G --topic T --out FILE [--strategy range] ...

Each worker subscribes to one topic in one group and, until SIGTERM (then it closes
cleanly, leaving the group) or SIGKILL, processes records and commits after processing:
each polled batch is first written out, then its offsets are committed synchronously.
What it does goes to ``--out`` as JSON lines, each written with one ``write`` (so a
``kill -9`` never tears a line) and stamped with ``time.monotonic()`` (one clock for
every process of the machine):

* ``{"ev": "started", "pid": ...}``
* ``{"ev": "assigned", "gen": G, "member": ID, "partitions": [...], "owned": [...]}``
  (``gen`` is the generation the assignment belongs to, ``member`` the member id;
  ``partitions`` is what this callback added)
* ``{"ev": "revoked", "partitions": [...], "owned": [...], "lost": bool}``
* ``{"ev": "records", "records": [[partition, offset, value], ...]}`` (processed)
* ``{"ev": "committed", "offsets": {partition: next offset}}`` after a successful commit,
  ``{"ev": "commit_failed", "error": ...}`` otherwise
* ``{"ev": "holding", "offsets": {...}}``: with ``--hold-file``, while that file exists
  the worker stops before committing what it just processed (then ``kill -9`` leaves
  processed, uncommitted records behind, deterministically)
* ``{"ev": "closing", "owned": [...]}`` then ``{"ev": "closed"}`` on SIGTERM.

Every event also carries ``"t"`` and ``"name"``. Records of partitions the worker does
not own at processing time are dropped unprocessed (never committed), so they count
for the next owner.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import struct
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.testing import scaled

CLIENTS = ("confluent", "kafka-python", "aiokafka")
STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")


@dataclass
class Journal:
    """Appends one JSON event per ``write`` to the output file."""

    path: Path
    name: str
    fd: int = -1
    owned: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(self, ev: str, **fields: Any) -> None:
        event = {"ev": ev, "t": time.monotonic(), "name": self.name, **fields}
        os.write(self.fd, (json.dumps(event) + "\n").encode())

    def assigned(self, gen: int | None, member: str | None, partitions: Iterable[int],
                 incremental: bool) -> None:
        parts = sorted(partitions)
        self.owned = self.owned | set(parts) if incremental else set(parts)
        self.emit("assigned", gen=gen, member=member, partitions=parts,
                  owned=sorted(self.owned))

    def revoked(self, partitions: Iterable[int], lost: bool = False) -> None:
        parts = sorted(partitions)
        self.owned -= set(parts)
        self.emit("revoked", partitions=parts, owned=sorted(self.owned), lost=lost)

    def process(self, records: list[tuple[int, int, str]]) -> dict[int, int]:
        """Process (write out) the records of owned partitions; returns the offsets to
        commit: partition -> next offset."""
        kept = [r for r in records if r[0] in self.owned]
        if not kept:
            return {}
        self.emit("records", records=kept)
        commit: dict[int, int] = {}
        for p, o, _ in kept:
            commit[p] = max(commit.get(p, 0), o + 1)
        return commit


def hold(path: Path | None, journal: Journal, commit: dict[int, int], stop: Stop) -> None:
    """While ``path`` exists, keep processed records uncommitted (a stuck "slow commit"
    that a test ends with ``kill -9``)."""
    if path is None or not path.exists():
        return
    journal.emit("holding", offsets=commit)
    while path.exists() and not stop.requested:
        time.sleep(0.02)


class Stop:
    """Set by SIGTERM/SIGINT; the worker then closes cleanly."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, *_: object) -> None:
        self.requested = True


def confluent_generation(cgmd: bytes) -> int | None:
    """The generation inside librdkafka's serialized consumer-group metadata
    (``CGMDv2:`` then the generation as a native int32)."""
    if not cgmd.startswith(b"CGMDv2:") or len(cgmd) < 11:
        return None
    return int(struct.unpack_from("=i", cgmd, 7)[0])


# --- confluent-kafka (librdkafka) ----------------------------------------------------


def run_confluent(args: argparse.Namespace, journal: Journal, stop: Stop) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_ms, "heartbeat.interval.ms": args.heartbeat_ms,
        "max.poll.interval.ms": args.rebalance_ms,
        "partition.assignment.strategy": args.strategy,
        "topic.metadata.refresh.interval.ms": 2000,
        "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
    }
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.debug:
        conf["debug"] = args.debug
    consumer = Consumer(conf)
    cooperative = args.strategy == "cooperative-sticky"

    def gen() -> int | None:
        return confluent_generation(consumer.consumer_group_metadata())

    def on_assign(_c: Any, parts: list[Any]) -> None:
        journal.assigned(gen(), consumer.memberid(), [tp.partition for tp in parts],
                         incremental=cooperative)

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        journal.revoked([tp.partition for tp in parts])

    def on_lost(_c: Any, parts: list[Any]) -> None:
        journal.revoked([tp.partition for tp in parts], lost=True)

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    try:
        while not stop.requested:
            batch: list[tuple[int, int, str]] = []
            for msg in consumer.consume(500, 0.2):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        journal.emit("client_error", error=str(err))
                    continue
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                batch.append((partition, offset, (msg.value() or b"").decode()))
            commit = journal.process(batch)
            if not commit:
                continue
            hold(args.hold_file, journal, commit, stop)
            try:
                consumer.commit(offsets=[TopicPartition(args.topic, p, o)
                                         for p, o in commit.items()], asynchronous=False)
                journal.emit("committed", offsets=commit)
            except KafkaException as e:
                journal.emit("commit_failed", error=str(e), offsets=commit)
        journal.emit("closing", owned=sorted(journal.owned))
    finally:
        consumer.close()
    journal.emit("closed")


# --- kafka-python ----------------------------------------------------------------------


def run_kafka_python(args: argparse.Namespace, journal: Journal, stop: Stop) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor,
                 "cooperative-sticky": CooperativeStickyAssignor}
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group,
        group_instance_id=args.instance_id or None, enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=args.heartbeat_ms, max_poll_interval_ms=args.rebalance_ms,
        partition_assignment_strategy=[assignors[args.strategy]],
        metadata_max_age_ms=2000, reconnect_backoff_max_ms=500)
    cooperative = args.strategy == "cooperative-sticky"

    def gen() -> int | None:
        return int(consumer._coordinator._generation.generation_id)

    def member() -> str:
        return str(consumer._coordinator._generation.member_id)

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            journal.revoked([tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned: Any) -> None:
            journal.assigned(gen(), member(), [tp.partition for tp in assigned],
                             incremental=cooperative)

        def on_partitions_lost(self, lost: Any) -> None:
            journal.revoked([tp.partition for tp in lost], lost=True)

    consumer.subscribe([args.topic], listener=Listener())
    try:
        while not stop.requested:
            polled = consumer.poll(timeout_ms=200, max_records=500)
            batch = [(r.partition, r.offset, (r.value or b"").decode())
                     for records in polled.values() for r in records]
            commit = journal.process(batch)
            if not commit:
                continue
            hold(args.hold_file, journal, commit, stop)
            try:
                consumer.commit({TopicPartition(args.topic, p): OffsetAndMetadata(o, "", -1)
                                 for p, o in commit.items()})
                journal.emit("committed", offsets=commit)
            except KafkaError as e:
                journal.emit("commit_failed", error=repr(e), offsets=commit)
        journal.emit("closing", owned=sorted(journal.owned))
    finally:
        consumer.close()
    journal.emit("closed")


# --- aiokafka -----------------------------------------------------------------------------


async def _run_aiokafka(args: argparse.Namespace, journal: Journal, stop: Stop) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from aiokafka.errors import KafkaError

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group,
        group_instance_id=args.instance_id or None, enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=args.heartbeat_ms, max_poll_interval_ms=args.rebalance_ms,
        rebalance_timeout_ms=args.rebalance_ms,
        partition_assignment_strategy=(assignors[args.strategy],),
        metadata_max_age_ms=2000)

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            journal.revoked([tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned: Any) -> None:
            coordinator = consumer._coordinator
            journal.assigned(coordinator.generation, coordinator.member_id,
                             [tp.partition for tp in assigned], incremental=False)

    consumer.subscribe([args.topic], listener=Listener())
    await consumer.start()
    try:
        while not stop.requested:
            polled = await consumer.getmany(timeout_ms=200, max_records=500)
            batch = [(r.partition, r.offset, (r.value or b"").decode())
                     for records in polled.values() for r in records]
            commit = journal.process(batch)
            if not commit:
                continue
            if args.hold_file is not None and args.hold_file.exists():
                journal.emit("holding", offsets=commit)
                while args.hold_file.exists() and not stop.requested:
                    await asyncio.sleep(0.02)
            try:
                await consumer.commit({TopicPartition(args.topic, p): o
                                       for p, o in commit.items()})
                journal.emit("committed", offsets=commit)
            except KafkaError as e:
                journal.emit("commit_failed", error=repr(e), offsets=commit)
        journal.emit("closing", owned=sorted(journal.owned))
    finally:
        await consumer.stop()
    journal.emit("closed")


def run_aiokafka(args: argparse.Namespace, journal: Journal, stop: Stop) -> None:
    asyncio.run(_run_aiokafka(args, journal, stop))


RUNNERS = {"confluent": run_confluent, "kafka-python": run_kafka_python,
           "aiokafka": run_aiokafka}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.integration.group_workers")
    parser.add_argument("client", choices=CLIENTS)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--name", default="")
    parser.add_argument("--strategy", default="range", choices=STRATEGIES)
    parser.add_argument("--instance-id", default="")
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--rebalance-ms", type=int, default=10000)
    parser.add_argument("--hold-file", type=Path, default=None,
                        help="while this file exists, processed records stay uncommitted")
    parser.add_argument("--debug", default="", help="librdkafka debug contexts (confluent)")
    args = parser.parse_args(argv)
    journal = Journal(args.out, args.name or f"{args.client}-{os.getpid()}")
    stop = Stop()
    journal.emit("started", pid=os.getpid(), client=args.client)
    RUNNERS[args.client](args, journal, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- the test side: spawning workers and reading their journals ------------------------

REPO_ROOT = Path(__file__).resolve().parents[2]


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every complete event of a journal (a line being written is skipped)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    events = []
    for line in raw.split(b"\n"):
        if line:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


class WorkerProcess:
    """One worker subprocess. ``stop()`` is a clean close (SIGTERM), ``kill()`` is
    ``kill -9``; ``ensure_dead()`` belongs in a ``finally``."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, out_dir: Path,
                 name: str, **options: Any) -> None:
        import subprocess

        self.client = client
        self.name = name
        self.journal_path = out_dir / f"{name}.jsonl"
        self.log_path = out_dir / f"{name}.log"
        self.killed_at: float | None = None
        cmd = [sys.executable, "-m", "tests.integration.group_workers", client,
               "--bootstrap", bootstrap, "--group", group, "--topic", topic,
               "--out", str(self.journal_path), "--name", name]
        for key, value in options.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=log,
                                            stderr=subprocess.STDOUT)

    def events(self, ev: str | None = None) -> list[dict[str, Any]]:
        events = read_journal(self.journal_path)
        return events if ev is None else [e for e in events if e["ev"] == ev]

    def owned(self) -> set[int]:
        """Partitions owned according to the latest assignment event."""
        owned: set[int] = set()
        for e in self.events():
            if e["ev"] in ("assigned", "revoked", "closing"):
                owned = set(e["owned"])
        return owned

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (the worker closes its consumer, leaving the group) and wait."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(scaled(timeout))

    def kill(self) -> None:
        """SIGKILL, noting when (``time.monotonic()``)."""
        self.killed_at = time.monotonic()
        self.process.kill()
        self.process.wait()

    def ensure_dead(self) -> None:
        if self.alive():
            self.process.kill()
            self.process.wait()
