"""A replicated Apache Kafka cluster (``headrace.cluster.KafkaCluster``: three brokers,
replication factor 3, ``min.insync.replicas=2``) losing brokers to ``kill -9``, through
real clients: acks=all producers, the schema registry, a consumer group.

- with one of three brokers down, acks=all produces go on; with two down the leader
  refuses them (NOT_ENOUGH_REPLICAS) and nothing acknowledged is lost once they return;
- ``headrace registry`` creates ``_schemas`` replicated three times and keeps its ids
  unique while the leader of ``_schemas`` is killed and restarted;
- a consumer group whose coordinator is killed finds the new one, rebalances when a
  second member joins, and consumes every record exactly once (commits after each batch);
- ``headrace topics create`` without ``--replication-factor`` makes a topic replicated as
  the cluster's ``default.replication.factor`` says;
- the console's brokers page and topic page show the live brokers, each partition's
  leader and ISR, and the partitions a killed broker leaves under-replicated;
- ``headrace capacity --live`` measures a topic's rate on the cluster once, not once per
  replica;
- the event store keeps every aggregate's versions contiguous, each command applied once,
  while the leader of its partition is killed and restarted (appends whose outcome was
  unknown retried with their command id, as its contract says);
- ``headrace cdc postgres`` under load rides out each broker killed in turn (the leaders
  of its events and offsets topics and its transaction coordinator among them) and a
  kill -9 of itself: every committed change in the log once, in commit order;
- ``headrace groups describe`` reports each partition's committed offset, log end and
  lag exactly while the broker leading the partitions and coordinating the group is down
  (it showed log end -1001 and a negative lag).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import httpx
import psycopg2
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from headrace.cluster import KafkaCluster
from headrace.eventsourcing import EventStore, Repository, StoreError
from headrace.pipelines.bank.domain import Account, bank_events
from headrace.registry.client import RegistryClient, RegistryClientError
from headrace.testing import ConsoleProcess, PostgresServer, SchemaRegistryProcess, scaled
from tests.cdc.support import ConnectorProcess, execute, read_topic, wait_for
from tests.cluster.conftest import create_topic, produce
from tests.eventsourcing.conftest import by_aggregate, fold, log_events
from tests.spark.kafka_helpers import read_all

pytestmark = pytest.mark.slow


def _wait_isr_size(cluster: KafkaCluster, topic: str, size: int) -> None:
    deadline = time.monotonic() + scaled(60)
    while len(cluster.partitions(topic)[0].isrs) != size:
        assert time.monotonic() < deadline, cluster.partitions(topic)[0]
        time.sleep(0.1)


def test_acks_all_with_one_broker_down_and_not_enough_replicas_with_two(
        healed: KafkaCluster, topic_name: str) -> None:
    cluster = healed
    create_topic(cluster, topic_name)
    assert sorted(cluster.partitions(topic_name)[0].replicas) == cluster.broker_ids
    first = cluster.leader(topic_name)
    before = [b"before-%d" % i for i in range(50)]
    assert set(produce(cluster.bootstrap_servers, topic_name, before).values()) == {None}

    cluster.kill(first)  # the leader: its partition moves to a follower
    one_down = [b"one-down-%d" % i for i in range(50)]
    outcome = produce(cluster.bootstrap_servers, topic_name, one_down,
                       **{"enable.idempotence": True})
    assert set(outcome.values()) == {None}, outcome
    second = cluster.wait_for_leader(topic_name, not_on=first)

    cluster.kill(second)
    _wait_isr_size(cluster, topic_name, 1)
    refused = produce(cluster.bootstrap_servers, topic_name, [b"refused"],
                       **{"enable.idempotence": False, "retries": 0})
    error = refused[b"refused"]
    assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS, error

    cluster.start_broker(first, wait=False)
    cluster.start_broker(second)
    cluster.wait_for_isr([topic_name])
    got = [m.value() for m in read_all(cluster.bootstrap_servers, topic_name, timeout=60)]
    assert got == before + one_down


def test_registry_replicates_schemas_and_keeps_ids_unique_across_a_broker_kill(
        healed: KafkaCluster) -> None:
    cluster = healed
    with SchemaRegistryProcess(cluster.bootstrap_servers) as registry:
        meta = cluster.partitions("_schemas")
        assert [sorted(p.replicas) for p in meta.values()] == [cluster.broker_ids]
        resource = ConfigResource(ConfigResource.Type.TOPIC, "_schemas")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        configs = admin.describe_configs([resource])[resource].result(scaled(30))
        assert configs["min.insync.replicas"].value == "2"

        client = RegistryClient(registry.url, timeout=scaled(30))
        ids: dict[str, int] = {}

        def register(n: int) -> None:
            subject = f"cluster-{n}"
            schema = json.dumps({"type": "record", "name": f"R{n}",
                                 "fields": [{"name": "n", "type": "int"}]})
            deadline = time.monotonic() + scaled(90)
            while True:  # a write during the failover may fail; the client retries
                try:
                    ids[subject] = int(client.register(subject, schema)["id"])
                    return
                except RegistryClientError:
                    assert time.monotonic() < deadline
                    time.sleep(0.5)

        for n in range(5):
            register(n)
        leader = cluster.leader("_schemas")
        cluster.kill(leader)
        for n in range(5, 10):
            register(n)
        cluster.start_broker(leader)
        cluster.wait_for_isr(["_schemas"])
        for n in range(10, 15):
            register(n)
        assert len(set(ids.values())) == 15, ids
        for subject, schema_id in ids.items():
            assert client.by_id(schema_id)["schema"].count(f'"R{subject.split("-")[1]}"') == 1
        client.close()


def _drain(consumers: list[Consumer], seen: list[bytes], until: int,
           also: Any = None) -> None:
    """Poll the consumers in turn, each batch committed synchronously after it is
    recorded in ``seen``, until ``seen`` holds ``until`` records and ``also()`` (if given)
    is true."""
    deadline = time.monotonic() + scaled(90)
    while len(seen) < until or (also is not None and not also()):
        assert time.monotonic() < deadline, f"{len(seen)} of {until} records consumed"
        for consumer in consumers:
            msgs = [m for m in consumer.consume(100, timeout=0.1) if m.error() is None]
            if msgs:
                seen.extend(m.value() for m in msgs)
                _commit(consumer)


def _commit(consumer: Consumer) -> None:
    deadline = time.monotonic() + scaled(60)
    while True:
        try:
            consumer.commit(asynchronous=False)
            return
        except KafkaException as e:
            if e.args[0].code() == KafkaError._NO_OFFSET:
                return
            assert time.monotonic() < deadline, e
            time.sleep(0.2)


def test_consumer_group_survives_a_coordinator_kill_and_rebalances(
        healed: KafkaCluster, topic_name: str) -> None:
    cluster = healed
    create_topic(cluster, topic_name, partitions=3)
    values = [b"v-%04d" % i for i in range(600)]
    assert set(produce(cluster.bootstrap_servers, topic_name, values).values()) == {None}
    group = f"{topic_name}-group"
    # The session must outlive the coordinator's move: a member whose session expires meanwhile
    # loses its assignment, cannot commit what it consumed, and the next owner reads that
    # again. 6 s expired once on a loaded machine (three Kafka JVMs, the suite's other
    # workers and a CPU hog), so the timeout is a generous wait, scaled like every other.
    settings = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "session.timeout.ms": round(scaled(30) * 1000), "heartbeat.interval.ms": 500}
    first = Consumer(settings)
    second: Consumer | None = None
    seen: list[bytes] = []

    def on_revoke(consumer: Consumer, _parts: Any) -> None:
        _commit(consumer)  # what was consumed is committed before another member takes it

    try:
        first.subscribe([topic_name], on_revoke=on_revoke)
        _drain([first], seen, 200)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        described = admin.describe_consumer_groups([group])[group].result(scaled(30))
        coordinator = described.coordinator.id
        cluster.kill(coordinator)
        _drain([first], seen, 400)
        cluster.start_broker(coordinator, wait=False)  # back while the group goes on
        second = Consumer(settings)
        second.subscribe([topic_name], on_revoke=on_revoke)
        _drain([first, second], seen, 400, also=lambda: bool(second and second.assignment()))
        more = [b"v-%04d" % i for i in range(600, 900)]
        assert set(produce(cluster.bootstrap_servers, topic_name, more).values()) == {None}
        values += more
        _drain([first, second], seen, len(values))
        after = admin.describe_consumer_groups([group])[group].result(scaled(30))
        assert after.coordinator.id != coordinator
        assert len(after.members) == 2
    finally:
        first.close()
        if second is not None:
            second.close()
    assert sorted(seen) == values, (len(seen), len(set(seen)))


def test_topics_create_takes_the_cluster_default_replication_factor(
        kafka_cluster: KafkaCluster, topic_name: str) -> None:
    """``headrace topics create NAME --partitions 2`` on a cluster with
    ``default.replication.factor=3`` makes a replicated topic (it sent 1 before)."""
    cmd = [sys.executable, "-m", "headrace", "topics", "create", topic_name, "-p", "2",
           "-b", kafka_cluster.bootstrap_servers]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(60), check=False)
    assert done.returncode == 0, done.stderr
    assert [sorted(p.replicas) for p in kafka_cluster.partitions(topic_name).values()] \
        == [kafka_cluster.broker_ids] * 2


def _page_until(url: str, done: Any) -> str:
    """GET ``url`` until ``done(text)`` holds (the cluster's metadata settles after a kill)."""
    deadline = time.monotonic() + scaled(60)
    while True:
        text = httpx.get(url, timeout=scaled(30)).text
        if done(text) or time.monotonic() > deadline:
            return text
        time.sleep(0.3)


def test_console_shows_brokers_isr_and_under_replicated_partitions(
        healed: KafkaCluster, topic_name: str) -> None:
    cluster = healed
    create_topic(cluster, topic_name, partitions=2, leader=1)
    victim = 3
    with ConsoleProcess(cluster.bootstrap_servers, sample_seconds=60) as console:
        brokers = _page_until(f"{console.url}/brokers", lambda t: "3 of 3 brokers live" in t)
        assert "3 of 3 brokers live" in brokers, brokers
        for b in cluster.broker_ids:
            assert f"<td>{cluster.address(b)}</td>" in brokers
        assert "none: every replica is in sync" in brokers

        cluster.kill(victim)
        brokers = _page_until(
            f"{console.url}/brokers",
            lambda t: len(re.findall(rf">{re.escape(topic_name)}</a>", t)) == 2)
        assert "2 of 3 brokers live" in brokers, brokers
        rows = re.findall(rf">{re.escape(topic_name)}</a></td><td>(\d+)</td>\s*"
                          r"<td>(-?\d+)</td><td>([\d,]+)</td><td>([\d,]*)</td>", brokers)
        assert sorted((int(p), int(leader), isr) for p, leader, _r, isr in rows) \
            == [(0, 1, "1,2"), (1, 1, "1,2")], rows
        topic = httpx.get(f"{console.url}/topics/{topic_name}", timeout=scaled(30)).text
        assert topic.count('class="warn under-replicated"') == 2, topic
        assert "<th>In sync</th>" in topic


def test_live_capacity_counts_each_record_once_not_once_per_replica(
        kafka_cluster: KafkaCluster, topic_name: str) -> None:
    create_topic(kafka_cluster, topic_name)
    stop = threading.Event()

    def load() -> None:
        producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers,
                             "acks": "all", "linger.ms": 5})
        while not stop.is_set():
            for _ in range(20):
                producer.produce(topic_name, b"x" * 100)
            producer.poll(0.05)
        producer.flush(scaled(30))

    loader = threading.Thread(target=load)
    loader.start()
    try:
        cmd = [sys.executable, "-m", "headrace", "capacity", "--live", "--sample", "2s",
               "--json", "-b", kafka_cluster.bootstrap_servers]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(120),
                              check=False)
    finally:
        stop.set()
        loader.join()
    assert done.returncode == 0, done.stderr
    (topic,) = [t for t in json.loads(done.stdout)["topics"] if t["topic"] == topic_name]
    assert topic["records_per_s"] > 0
    # A 100-byte value plus its record and batch overhead, counted once (three replicas
    # summed gave about 315 bytes per record). Sizes and offsets are read at slightly
    # different moments, hence the slack below 100.
    assert 60 < topic["bytes_per_s"] / topic["records_per_s"] < 200, topic


def test_event_store_versions_stay_contiguous_across_a_leader_kill(
        healed: KafkaCluster, topic_name: str) -> None:
    cluster = healed
    with EventStore(cluster.bootstrap_servers, topic_name, bank_events, partitions=1,
                    timeout=scaled(30)) as store:
        accounts = Repository(store, Account)
        retried = 0

        def command(command_id: str, decide: Any) -> None:
            nonlocal retried
            deadline = time.monotonic() + scaled(120)
            while True:
                try:
                    accounts.execute("acc", decide, command_id=command_id, retries=3)
                    return
                except StoreError:  # outcome unknown: the same command id never applies twice
                    assert time.monotonic() < deadline, command_id
                    retried += 1
                    time.sleep(0.2)

        command("open", lambda a: a.open("ann"))
        for i in range(60):
            if i == 20:
                leader = cluster.leader(topic_name)
                cluster.kill(leader)
            if i == 40:
                cluster.start_broker(leader)
            command(f"deposit-{i}", lambda a: a.deposit(10))
        assert len(cluster.partitions(topic_name)[0].replicas) == 3  # the cluster's default
    events = by_aggregate(log_events(cluster.bootstrap_servers, topic_name))["acc"]
    assert [e.version for e in events] == list(range(1, 62)), retried
    assert len({e.command_id for e in events}) == 61
    assert fold(events).balance == 600


class _TableWriter(threading.Thread):
    """One PostgreSQL transaction after another (now and then a new row, then one to three
    bumps of ``v``), each committed change recorded as (op, id, v) in commit order."""

    def __init__(self, dsn: str, table: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.table = dsn, table
        self.rng = random.Random(33)
        self.stop = threading.Event()
        self.committed: list[tuple[str, int, int]] = []

    def run(self) -> None:
        conn = psycopg2.connect(self.dsn)
        next_id = 100
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    changes: list[tuple[str, int, int]] = []
                    if self.rng.random() < 0.2:
                        cur.execute(f"INSERT INTO {self.table} VALUES (%s, 1)", (next_id,))
                        changes.append(("c", next_id, 1))
                        next_id += 1
                    for _ in range(self.rng.randint(1, 3)):
                        key = self.rng.randrange(20)
                        cur.execute(f"UPDATE {self.table} SET v = v + 1 WHERE id = %s "
                                    "RETURNING v", (key,))
                        changes.append(("u", key, cur.fetchone()[0]))
                    conn.commit()
                    self.committed.extend(changes)
                    time.sleep(0.01)
        finally:
            conn.close()

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + scaled(60)
        while len(self.committed) < count:
            assert self.is_alive() and time.monotonic() < deadline, len(self.committed)
            time.sleep(0.05)


def test_cdc_from_postgres_loses_and_doubles_nothing_across_broker_kills(
        healed: KafkaCluster, postgres: PostgresServer) -> None:
    """``headrace cdc postgres`` on the cluster makes its topics replicated as the cluster
    says. Under load each broker in turn is killed and restarted, the one leading the
    events partition first (so the leaders of its events, its offsets topic and its
    transaction coordinator all die once): the connector rides every failover out. Then
    the connector itself is killed and restarted, resuming from the offsets the failovers
    left. The log holds every committed change once, in commit order, and the offsets
    record counts exactly those."""
    cluster = healed
    name = f"t{uuid.uuid4().hex[:10]}"
    table, topic, offsets = f"{name}.items", f"{name}.{name}.items", "__headrace_cdc_offsets"
    execute(postgres.dsn, f"CREATE SCHEMA {name}",
            f"CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)",
            f"INSERT INTO {table} SELECT g, 1 FROM generate_series(0, 19) g")
    writer = _TableWriter(postgres.dsn, table)
    with ConnectorProcess(postgres.dsn, table, cluster.bootstrap_servers, name) as connector:
        for t in (topic, offsets):
            assert [sorted(p.replicas) for p in cluster.partitions(t).values()] \
                == [cluster.broker_ids], t
        writer.start()
        try:
            writer.wait_for(100)
            first = cluster.leader(topic)
            for victim in [first, *[b for b in cluster.broker_ids if b != first]]:
                cluster.kill(victim)
                cluster.wait_for_leader(topic, not_on=victim)
                writer.wait_for(len(writer.committed) + 150)
                cluster.start_broker(victim)
                cluster.wait_for_isr()
                assert connector.process is not None and connector.process.poll() is None, \
                    "".join(connector.output_lines())
            connector.kill()  # it resumes from the offsets record the failovers left
            writer.wait_for(len(writer.committed) + 100)
            connector.start()
            writer.wait_for(len(writer.committed) + 100)
        finally:
            writer.stop.set()
            writer.join()
        want = [("r", i, 1) for i in range(20)] + writer.committed

        def caught_up() -> list[Any] | None:
            events = read_topic(cluster.bootstrap_servers, topic)
            return events if len(events) >= len(want) else None

        events = wait_for(caught_up, 120, "the connector to catch up")
    assert all(value is not None for _key, value in events)  # no deletes, no tombstones
    got = [(v["op"], k["id"], v["after"]["v"]) for k, v in events if v is not None]
    assert got == want, (f"{len(got)} events for {len(want)} changes: "
                         f"{len(set(want) - set(got))} missing, "
                         f"{len(got) - len(set(got))} duplicated")
    status = subprocess.run(
        [sys.executable, "-m", "headrace", "cdc", "status", "--dsn", postgres.dsn,
         "--slot", name, "--bootstrap-servers", cluster.bootstrap_servers],
        capture_output=True, text=True, timeout=scaled(60), check=False)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"{topic}: {len(want)} change events" in status.stdout, status.stdout


LIBRDKAFKA_COORD_ABORT = "rd_kafka_enq_once_del_source_return: Assertion"
"""librdkafka's abort (SIGABRT) when a request to a group coordinator fails to be sent, e.g.
to a coordinator killed a moment before (a use-after-free in rd_kafka_admin_coord_request's
error path; librdkafka pull request 5397, in no release up to 2.16): the command dies
before it can retry. It is the client library's, not the broker's or the command's."""


def _group_lag(bootstrap: str, group: str, topic: str) -> tuple[list[tuple[int, ...]], str]:
    """``headrace groups describe``'s (partition, committed, log end, lag) rows for
    ``topic``, and its whole output."""
    done = subprocess.run([sys.executable, "-m", "headrace", "groups", "describe", group,
                           "-b", bootstrap], capture_output=True, text=True,
                          timeout=scaled(90), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = re.findall(rf"{re.escape(topic)}\W+(\d+)\W+(\d+)\W+(\d+)\W+(\d+)\W", done.stdout)
    return sorted(tuple(int(x) for x in row) for row in rows), done.stdout


def test_group_lag_reads_the_same_with_the_leader_and_the_coordinator_killed(
        healed: KafkaCluster, topic_name: str) -> None:
    """``headrace groups describe`` on the cluster: each partition's committed offset, log
    end and lag once (not once per replica), and the same while the broker that leads
    every partition and coordinates the group is down."""
    cluster = healed
    group = f"{topic_name}-group"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    deadline = time.monotonic() + scaled(60)
    while True:  # a fresh cluster's coordinators may still be loading: NOT_COORDINATOR
        try:
            victim = admin.describe_consumer_groups([group])[group].result(
                scaled(30)).coordinator.id
            break
        except KafkaException as e:
            assert time.monotonic() < deadline, e
            time.sleep(0.2)
    create_topic(cluster, topic_name, partitions=3, leader=victim)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for p in range(3):
        for i in range(30):
            producer.produce(topic_name, b"%d" % i, partition=p)
    assert producer.flush(scaled(60)) == 0
    committer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    deadline = time.monotonic() + scaled(60)
    try:
        while True:  # a fresh cluster's coordinator may still be loading
            try:
                committer.commit(offsets=[TopicPartition(topic_name, p, 10 * (p + 1))
                                          for p in range(3)], asynchronous=False)
                break
            except KafkaException as e:
                assert e.args[0].retriable() and time.monotonic() < deadline, e
                time.sleep(0.2)
    finally:
        committer.close()
    want = [(0, 10, 30, 20), (1, 20, 30, 10), (2, 30, 30, 0)]
    rows, out = _group_lag(cluster.bootstrap_servers, group, topic_name)
    assert rows == want, out
    assert "Total lag: 30" in out

    cluster.kill(victim)
    # The group's new coordinator serves it as of its high watermark, which after a leader
    # change trails its log until the remaining follower fetches again: until then Kafka
    # answers as for an unknown group (Dead, no committed offsets). The commit is not lost.
    # Until the cluster notices the kill, a lookup may still name the dead coordinator, and
    # librdkafka 2.16 then aborts the command if sending to it fails (LIBRDKAFKA_COORD_ABORT).
    deadline = time.monotonic() + scaled(60)
    while True:
        try:
            rows, out = _group_lag(cluster.bootstrap_servers, group, topic_name)
            break
        except AssertionError as e:
            assert ("does not exist" in str(e) or LIBRDKAFKA_COORD_ABORT in str(e)) \
                and time.monotonic() < deadline, e
            time.sleep(0.5)
    assert rows == want, out
    assert "Total lag: 30" in out
