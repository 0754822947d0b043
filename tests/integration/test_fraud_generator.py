"""The fraud generator's ``run`` against a real broker: what it publishes is what its ground
truth says, keyed and partitioned as Kafka clients expect."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from headrace.pipelines.fraud.generator import FraudConfig, FraudTopics, GroundTruth, run
from headrace.protocol.partitioner import java_partition
from headrace.testing import EmbeddedBroker, scaled

TXN_TYPES = {"txn_id": str, "card_id": str, "user_id": str, "merchant_id": str,
             "amount": float, "currency": str, "lat": float, "lon": float, "city": str,
             "country": str, "category": str, "event_time": int}


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes
    value: bytes
    timestamp_ms: int


def _read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list[Rec]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fraud-readback",
                         "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=scaled(10))[1]
                for tp in tps}
        consumer.assign(tps)
        out: list[Rec] = []
        nexts = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + scaled(timeout)
        while any(nexts[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"read {nexts} of {ends}"
            for msg in consumer.consume(10_000, 0.5):
                assert msg.error() is None, msg.error()
                p, offset = msg.partition(), msg.offset()
                assert p is not None and offset is not None
                out.append(Rec(p, msg.key() or b"", msg.value() or b"", msg.timestamp()[1]))
                nexts[p] = offset + 1
        return out
    finally:
        consumer.close()


def _is_valid_txn(value: bytes) -> bool:
    try:
        record = json.loads(value.decode())
    except (UnicodeDecodeError, ValueError):
        return False
    return (isinstance(record, dict) and set(record) == set(TXN_TYPES)
            and all(type(record[k]) is t for k, t in TXN_TYPES.items()))


def test_run_publishes_what_its_truth_says(broker: EmbeddedBroker, topic_name: str,
                                            tmp_path: Path) -> None:
    topics = FraudTopics(transactions=f"{topic_name}-tx", profiles=f"{topic_name}-profiles")
    config = FraudConfig(seed=21, rate=2000, duration_s=2, users=4000, malformed_share=0.01,
                         late_share=0.02, velocity_bursts=90, impossible_travel=90,
                         amount_anomalies=90, card_testing=90, profile_updates=600)
    progress: list[tuple[int, float]] = []
    truth = run(broker.bootstrap_servers, config, topics=topics, realtime=False,
                truth_path=tmp_path / "truth.json",
                on_progress=lambda sent, elapsed: progress.append((sent, elapsed)))
    assert GroundTruth.from_json((tmp_path / "truth.json").read_text()) == truth
    assert len(truth.incidents) >= 8 and truth.malformed_count and truth.late_count
    assert not truth.partial_incidents

    txns = _read_all(broker.bootstrap_servers, topics.transactions, 4)
    assert len(txns) == truth.total_txns + truth.malformed_count
    assert sum(_is_valid_txn(r.value) for r in txns) == truth.total_txns
    assert all(r.partition == java_partition(r.key, 4) for r in txns)
    assert len({r.partition for r in txns}) == 4
    ids = {json.loads(r.value)["txn_id"] for r in txns if _is_valid_txn(r.value)}
    assert all(set(i.txn_ids) <= ids for i in truth.incidents)

    profiles = _read_all(broker.bootstrap_servers, topics.profiles, 1)
    assert len(profiles) == truth.profile_records > config.users
    latest = {r.key: json.loads(r.value) for r in profiles}  # in offset order
    assert len(latest) == config.users
    assert all(p["user_id"].encode() == k for k, p in latest.items())
    updated = [p for p in latest.values() if p["updated_at"] >= truth.start_ms]
    assert len(updated) == truth.profile_records - config.users

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource(ResourceType.TOPIC, topics.profiles)
    configs = admin.describe_configs([resource])[resource].result(scaled(30))
    assert configs["cleanup.policy"].value == "compact"
    assert progress[-1][0] == len(txns) + len(profiles)

    # A second run into the same topics: they exist already, which is fine.
    again = run(broker.bootstrap_servers, FraudConfig(seed=22, rate=100, duration_s=0.5,
                                                      users=300, profile_updates=0),
                topics=topics, realtime=False)
    assert again.profile_records == 300


def test_realtime_run_paces_on_the_wall_clock_and_stops(broker: EmbeddedBroker,
                                                        topic_name: str) -> None:
    topics = FraudTopics(transactions=f"{topic_name}-tx", profiles=f"{topic_name}-profiles")
    config = FraudConfig(seed=8, rate=400, duration_s=5, users=2500, late_share=0.0)
    stop = threading.Event()
    # The stop comes after a number of transaction records, not after some wall-clock time:
    # what the run sent before it does not depend on the machine's speed.
    stop_after, sent = 300, [0]

    def count_then_stop(value: bytes) -> bytes:
        sent[0] += 1
        if sent[0] == stop_after:
            stop.set()
        return value

    before = time.time() * 1000
    truth = run(broker.bootstrap_servers, config, topics=topics, realtime=True, stop=stop,
                encode_transaction=count_then_stop)
    after = time.time() * 1000
    # The stream starts at the wall clock (not at the config's start_ms, in the past).
    assert before <= truth.start_ms <= after
    # The stop ends the run early: with the record in hand, exactly the ones counted went
    # out (a whole run is about 2000), and the truth covers exactly those.
    assert sent[0] == stop_after
    txns = _read_all(broker.bootstrap_servers, topics.transactions, 4)
    assert len(txns) == truth.total_txns + truth.malformed_count == stop_after
    # Each record goes out at its arrival time: after its event, by the network delay
    # (never before it). The upper bounds allow for a loaded machine falling behind its
    # schedule, so their slack is scaled.
    behind = sorted(r.timestamp_ms - json.loads(r.value)["event_time"]
                    for r in txns if _is_valid_txn(r.value))
    assert behind[0] >= -50
    assert behind[len(behind) // 2] <= 50 + scaled(350)
    assert behind[-1] <= config.delay_max_ms + scaled(2000)
