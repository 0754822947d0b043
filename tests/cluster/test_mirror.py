"""From one machine to a cluster: Apache Kafka's MirrorMaker 2 (``headrace cluster
mirror``) copies a topic, its configs and its consumer groups' committed offsets from an
embedded headrace broker onto the replicated cluster, and consumers switched over resume
where they were: a group that had read everything reads exactly the records that came
after, a group further behind reads again at most what it had read, never skipping one.
And the other way round: the cluster's topic, config and group copied down onto a fresh
headrace broker, which then hosts MirrorMaker's Connect workers (their compacted internal
topics, heartbeats, checkpoints) and takes the translated group offsets.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from headrace.cluster import KafkaCluster
from headrace.cluster.mirror import MirrorMaker
from headrace.testing import EmbeddedBroker, scaled
from tests.cluster.conftest import create_topic
from tests.spark.kafka_helpers import read_all

pytestmark = pytest.mark.slow

PARTITIONS = 2
FIRST, MORE = 150, 50  # records per partition before the mirror starts, and while it runs
BEHIND_AT = 40


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        for p in range(PARTITIONS):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p)
    assert producer.flush(scaled(30)) == 0


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, offset) for p in range(PARTITIONS)],
                        asynchronous=False)
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on ``topic`` (partitions without one left out)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                   timeout=scaled(10))
    except KafkaException:
        return {}
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def _wait(what: str, check: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while not check():
        assert time.monotonic() < deadline, f"not within {scaled(timeout):g} s: {what}"
        time.sleep(0.5)


def _read_group(bootstrap: str, group: str, topic: str, expected: int) -> list[str]:
    """What a consumer of ``group`` reads from its committed offsets to the end (it stops
    after ``expected`` records plus two idle seconds, or at the deadline)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[str] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + scaled(60)
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            batch = [m for m in consumer.consume(500, 0.5) if m.error() is None]
            got += [m.value().decode() for m in batch]
            if batch:
                idle_since = time.monotonic()
            elif len(got) >= expected and time.monotonic() - idle_since > 2:
                break
    finally:
        consumer.close()
    return got


def test_mirror_maker_moves_a_topic_its_configs_and_group_offsets_onto_the_cluster(
        broker: EmbeddedBroker, kafka_cluster: KafkaCluster, topic_name: str,
        tmp_path: Path) -> None:
    source, target = broker.bootstrap_servers, kafka_cluster.bootstrap_servers
    source_admin = AdminClient({"bootstrap.servers": source})
    source_admin.create_topics([NewTopic(topic_name, PARTITIONS, 1, config={
        "retention.ms": "86400000"})])[topic_name].result(scaled(30))
    _produce(source, topic_name, 0, FIRST)
    caught_up, behind = f"{topic_name}-caught-up", f"{topic_name}-behind"
    _commit(source, caught_up, topic_name, FIRST)
    _commit(source, behind, topic_name, BEHIND_AT)

    cmd = [sys.executable, "-m", "headrace", "cluster", "mirror", "--from", source,
           "--to", target, "--topics", re.escape(topic_name),
           "--groups", re.escape(topic_name) + "-.*", "--interval", "1",
           "--dir", str(tmp_path)]
    mirror = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    admin = AdminClient({"bootstrap.servers": target})
    try:
        _wait("the caught-up group's offsets translated", timeout=180, check=lambda: (
            _committed(target, caught_up, topic_name) == dict.fromkeys(range(PARTITIONS), FIRST)))
        _produce(source, topic_name, FIRST, MORE)  # while the mirror runs
        _wait("the new records copied",
              lambda: len(read_all(target, topic_name)) == PARTITIONS * (FIRST + MORE))
    finally:
        mirror.terminate()
        out, _ = mirror.communicate(timeout=scaled(60))
    assert mirror.returncode == 0, out
    assert "mirroring" in out and "Traceback" not in out, out

    copied = [m.value().decode() for m in read_all(target, topic_name)]
    assert sorted(copied) == sorted(f"{p}-{i}" for p in range(PARTITIONS)
                                    for i in range(FIRST + MORE))
    meta = admin.list_topics(topic_name, timeout=scaled(10)).topics[topic_name]
    assert [len(meta.partitions[p].replicas) for p in range(PARTITIONS)] == [3] * PARTITIONS
    resource = ConfigResource("topic", topic_name)
    configs = admin.describe_configs([resource])[resource].result(scaled(10))
    assert configs["retention.ms"].value == "86400000"

    # A group that had read everything resumes exactly at the records after it.
    assert sorted(_read_group(target, caught_up, topic_name, PARTITIONS * MORE)) == sorted(
        f"{p}-{i}" for p in range(PARTITIONS) for i in range(FIRST, FIRST + MORE))
    # One further behind resumes at or before its offset: nothing it had not read is
    # skipped; what it reads again is at most what it had read. MirrorMaker translates an
    # offset only while it keeps an offset sync at or below it (it thins old syncs out), so
    # such a group may get no offset on the target: it then starts where its
    # auto.offset.reset says (earliest here), again skipping nothing.
    back = {p: _committed(target, behind, topic_name).get(p, 0) for p in range(PARTITIONS)}
    assert all(0 <= back[p] <= BEHIND_AT for p in range(PARTITIONS)), back
    again = _read_group(target, behind, topic_name, PARTITIONS * (FIRST + MORE - BEHIND_AT))
    assert len(again) == len(set(again))
    assert set(again) == {f"{p}-{i}" for p in range(PARTITIONS)
                          for i in range(back[p], FIRST + MORE)}


def _produce_keyed(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(start, start + count):
        for p in range(PARTITIONS):
            producer.produce(topic, f"{p}-{i}".encode(), key=f"k{i}".encode(), partition=p,
                             headers=[("n", str(i).encode()), ("p", str(p).encode())])
    assert producer.flush(scaled(30)) == 0


def _records(bootstrap: str, topic: str) -> dict[int, list[tuple[bytes, bytes, list[Any]]]]:
    """Every record of ``topic`` by partition, in offset order: (key, value, headers)."""
    got: dict[int, list[tuple[bytes, bytes, list[Any]]]] = {p: [] for p in range(PARTITIONS)}
    for m in read_all(bootstrap, topic):
        got[m.partition()].append((m.key(), m.value(), list(m.headers() or [])))
    return got


def test_mirror_maker_copies_a_cluster_down_onto_a_headrace_broker(
        kafka_cluster: KafkaCluster, topic_name: str, tmp_path: Path) -> None:
    source = kafka_cluster.bootstrap_servers
    create_topic(kafka_cluster, topic_name, PARTITIONS, config={"retention.ms": "86400000"})
    _produce_keyed(source, topic_name, 0, FIRST)
    group = f"{topic_name}-down"
    _commit(source, group, topic_name, FIRST)

    expected = {p: [(f"k{i}".encode(), f"{p}-{i}".encode(),
                     [("n", str(i).encode()), ("p", str(p).encode())])
                    for i in range(FIRST + MORE)] for p in range(PARTITIONS)}
    with EmbeddedBroker() as laptop:
        target = laptop.bootstrap_servers
        mirror = MirrorMaker(source, target, tmp_path / "mm2", topics=re.escape(topic_name),
                             groups=re.escape(group))
        try:
            mirror.start()
            _wait("the group's offsets translated", timeout=180, check=lambda: (
                _committed(target, group, topic_name) == dict.fromkeys(range(PARTITIONS), FIRST)))
            _produce_keyed(source, topic_name, FIRST, MORE)  # while the mirror runs
            _wait("the new records copied", lambda: (
                len(read_all(target, topic_name)) == PARTITIONS * (FIRST + MORE)))
            assert mirror.alive()
        finally:
            mirror.stop()
        log = mirror.output()
        assert _records(target, topic_name) == expected, log
        admin = AdminClient({"bootstrap.servers": target})
        resource = ConfigResource("topic", topic_name)
        configs = admin.describe_configs([resource])[resource].result(scaled(10))
        assert configs["retention.ms"].value == "86400000"
        assert sorted(_read_group(target, group, topic_name, PARTITIONS * MORE)) == sorted(
            f"{p}-{i}" for p in range(PARTITIONS) for i in range(FIRST, FIRST + MORE))
        # MirrorMaker's own shutdown may race its checkpoint task against its closing admin
        # client ("Cannot accept new calls when AdminClient is closing"): only errors while
        # it ran count
        running = log.split("INFO Kafka MirrorMaker stopping", 1)[0]
        assert " ERROR " not in running, log
