"""Fixtures of the cluster tests: one replicated Apache Kafka per module (its start, ~15-25 s
on two cores, is the area's main cost, so each module puts several scenarios on one)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.cluster import KafkaCluster
from headrace.pipelines.fraud.pipeline import PipelineTopics
from headrace.testing import PostgresServer, scaled

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """Controller 0, brokers 1-3, RF 3, min ISR 2. A test that kills a broker brings it
    back (``healed``) before it ends, so the next test finds all three."""
    os.environ.setdefault("HEADRACE_JVM_LIB", str(REPO_ROOT / "jvm" / "lib"))
    with KafkaCluster() as cluster:
        yield cluster


@pytest.fixture
def healed(kafka_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The cluster, with every broker restarted after the test and all replicas in sync."""
    yield kafka_cluster
    for b in kafka_cluster.broker_ids:
        if not kafka_cluster.running(b):
            kafka_cluster.start_broker(b)
    kafka_cluster.wait_for_isr()


def create_topic(cluster: KafkaCluster, name: str, partitions: int = 1,
                 leader: int | None = None, config: dict[str, str] | None = None) -> None:
    """A topic with the cluster's default replication factor; with ``leader``, every
    partition's preferred (so first) leader is that broker. Returns once every partition
    has a leader and a full ISR."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    if leader is None:
        topic = NewTopic(name, num_partitions=partitions, config=config or {})
    else:
        order = [leader, *[b for b in cluster.broker_ids if b != leader]]
        topic = NewTopic(name, num_partitions=partitions, replica_assignment=[order] * partitions,
                         config=config or {})
    admin.create_topics([topic])[name].result(scaled(30))
    cluster.wait_for_isr([name], timeout=60)


def create_fraud_topics(cluster: KafkaCluster, names: PipelineTopics, leader: int) -> None:
    """The fraud pipeline's four topics (transactions in 4 partitions, compacted profiles,
    alerts, dead letters), every partition led by broker ``leader``: one kill of it moves
    the leaders of the real-time path's input and output at once."""
    create_topic(cluster, names.transactions, partitions=4, leader=leader)
    create_topic(cluster, names.profiles, leader=leader, config={"cleanup.policy": "compact"})
    create_topic(cluster, names.alerts, leader=leader)
    create_topic(cluster, names.dead_letters, leader=leader)


def produce(bootstrap: str, topic: str, values: list[bytes],
             **config: Any) -> dict[bytes, KafkaError | None]:
    """Produce each value and flush; the delivery outcome of each (None: acknowledged)."""
    outcome: dict[bytes, KafkaError | None] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         **config})
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: outcome.__setitem__(
            msg.value(), err))
        producer.poll(0)
    assert producer.flush(scaled(60)) == 0
    return outcome


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL (``wal_level=logical``) for the CDC scenarios (~2 s to start)."""
    with PostgresServer() as pg:
        yield pg
