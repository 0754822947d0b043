"""The registry's durability and its single-writer fencing, on real processes:
``kill -9`` during registrations loses no acknowledged id; two registries on one broker
never hand out one id for two schemas; ids are not reused after the record holding the
largest one was deleted and compacted away; the same holds on Apache Kafka."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.registry.client import RegistryClient, RegistryClientError
from headrace.testing import EmbeddedBroker, SchemaRegistryProcess, scaled
from tests.conftest import AnyBroker
from tests.registry.schemas import avro_record, field


def _schema(n: int, tag: str) -> str:
    return avro_record(f"R{tag}_{n}", field("n", "int"))


def _pair(bootstrap: str) -> tuple[SchemaRegistryProcess, SchemaRegistryProcess]:
    topic = f"_schemas-{uuid.uuid4().hex[:8]}"
    return (SchemaRegistryProcess(bootstrap, topic=topic, group=topic),
            SchemaRegistryProcess(bootstrap, topic=topic, group=topic))


@pytest.fixture
def two_registries(broker: EmbeddedBroker) -> Iterator[tuple[SchemaRegistryProcess, ...]]:
    a, b = _pair(broker.bootstrap_servers)
    with a, b:
        yield a, b


def _all_ids(url: str) -> dict[int, set[str]]:
    client = RegistryClient(url)
    ids: dict[int, set[str]] = {}
    for entry in client.request("GET", "/schemas", params={"deleted": True}):
        ids.setdefault(entry["id"], set()).add(json.dumps(json.loads(entry["schema"])))
    client.close()
    return ids


def _register_concurrently(urls: list[str], count: int, tag: str) -> dict[str, int]:
    acked: dict[str, int] = {}
    lock = threading.Lock()

    def writer(worker: int) -> None:
        for n in range(worker, count, len(urls) * 2):
            client = RegistryClient(urls[n % len(urls)], timeout=scaled(20))
            subject = f"{tag}-{n}"
            try:
                answer = client.register(subject, _schema(n, tag))
            except RegistryClientError:
                continue  # refused or unreachable: not acknowledged, may or may not exist
            finally:
                client.close()
            with lock:
                acked[subject] = int(answer["id"])

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(len(urls) * 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return acked


def _check_acked(url: str, acked: dict[str, int], tag: str) -> None:
    client = RegistryClient(url)
    for subject, schema_id in acked.items():
        latest = client.version(subject)
        n = int(subject.rsplit("-", 1)[1])
        assert (latest["id"], json.loads(latest["schema"])) == (schema_id, json.loads(_schema(n, tag)))
    client.close()
    for schema_id, texts in _all_ids(url).items():
        assert len(texts) == 1, f"id {schema_id} names {len(texts)} different schemas"


def test_two_registries_never_hand_out_one_id_twice(
        two_registries: tuple[SchemaRegistryProcess, ...]) -> None:
    a, b = two_registries
    acked = _register_concurrently([a.url, b.url], 60, "pair")
    assert len(acked) == 60
    assert len(set(acked.values())) == 60
    _check_acked(a.url, acked, "pair")
    _check_acked(b.url, acked, "pair")


@pytest.mark.slow
def test_kill_9_during_registrations_loses_no_acknowledged_id(broker: EmbeddedBroker) -> None:
    a, b = _pair(broker.bootstrap_servers)
    rng = random.Random(7)
    stop = threading.Event()
    kills = 0

    def killer() -> None:
        nonlocal kills
        while not stop.is_set():
            time.sleep(rng.uniform(0.05, 0.4))
            victim = rng.choice((a, b))
            victim.kill()
            kills += 1
            victim.start()

    with a, b:
        chaos = threading.Thread(target=killer)
        chaos.start()
        try:
            acked: dict[str, int] = {}
            while kills < 20:
                acked.update(_register_concurrently([a.url, b.url], 40, f"k{kills}"))
        finally:
            stop.set()
            chaos.join()
        assert kills >= 20 and len(acked) > 0
        for tag in {s.rsplit("-", 1)[0] for s in acked}:
            _check_acked(a.url, {s: i for s, i in acked.items() if s.startswith(tag + "-")}, tag)
    with SchemaRegistryProcess(broker.bootstrap_servers, topic=a.topic, group=a.group) as fresh:
        for tag in {s.rsplit("-", 1)[0] for s in acked}:
            _check_acked(fresh.url, {s: i for s, i in acked.items()
                                     if s.startswith(tag + "-")}, tag)


def test_restart_serves_the_same_ids(any_broker: AnyBroker) -> None:
    a, b = _pair(any_broker.bootstrap_servers)
    with a:
        acked = _register_concurrently([a.url], 10, "restart")
    with a, b:
        _check_acked(a.url, acked, "restart")
        _check_acked(b.url, acked, "restart")
        more = _register_concurrently([a.url, b.url], 10, "restart2")
        assert not set(more.values()) & set(acked.values())
        _check_acked(b.url, more, "restart2")


def _schema_keys(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    keys: list[bytes] = []
    try:
        while True:
            msg = consumer.poll(scaled(10))
            assert msg is not None
            if msg.error():
                break
            keys.append(msg.key() or b"")
    finally:
        consumer.close()
    return keys


@pytest.mark.slow
def test_ids_are_not_reused_after_the_largest_is_compacted_away() -> None:
    with EmbeddedBroker(extra_args=["--log-cleaner-backoff-ms", "100"]) as broker:
        topic = "_schemas"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 1, 1, config={
            "cleanup.policy": "compact", "segment.ms": "50", "delete.retention.ms": "0",
            "min.cleanable.dirty.ratio": "0.01"})])[topic].result(scaled(10))
        with SchemaRegistryProcess(broker.bootstrap_servers) as registry:
            client = RegistryClient(registry.url)
            client.register("keep", _schema(1, "c"))
            doomed = client.register("doomed", _schema(2, "c"))["id"]
            client.delete("doomed")
            client.delete("doomed", permanent=True)
            deadline = time.monotonic() + scaled(60)
            while any(b'"doomed"' in k for k in _schema_keys(broker.bootstrap_servers, topic)):
                assert time.monotonic() < deadline, "the cleaner never removed the tombstone"
                client.config("keep", "BACKWARD")  # appends roll segments, so they get cleaned
                time.sleep(0.3)
            client.close()
        with SchemaRegistryProcess(broker.bootstrap_servers) as registry:
            client = RegistryClient(registry.url)
            assert client.register("next", _schema(3, "c"))["id"] > doomed
            client.close()
