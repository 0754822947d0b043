"""Log compaction through real clients: a changelog compacts to the latest value per key
with offsets preserved, tombstoned keys disappear after delete.retention.ms, a ``kill -9``
at any step of a cleaning pass loses nothing, and the internal compacted topics
(``__consumer_offsets``, ``__transaction_state``) replay correctly after cleaning.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from headrace.testing import EmbeddedBroker, scaled
from tests.compat.clients import (
    aiokafka_consume,
    confluent_consume,
    kafka_python_consume,
    kcat_consume,
)
from tests.integration.txn_support import Reader, transactional_producer, wait_for

FAST_CLEANER = ["--log-cleaner-backoff-ms", "100", "--log-retention-check-interval-ms", "200"]
Changelog = list[tuple[int, bytes, bytes | None]]  # offset, key, value
SEGMENT_MS = 300


@pytest.fixture(scope="module")
def cleaning_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=FAST_CLEANER) as b:
        yield b


def create_compacted(bootstrap: str, topic: str, **configs: str) -> None:
    cfg = {"cleanup.policy": "compact", "segment.bytes": "65536", "segment.ms": str(SEGMENT_MS),
           "min.cleanable.dirty.ratio": "0.01", **configs}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=cfg)])[topic].result(scaled(10))


def set_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(scaled(10))


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> Changelog:
    """Produce in order (idempotent producer: offsets follow the order); returns
    ``(offset, key, value)`` as acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "batch.num.messages": 500})
    acked: Changelog = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        assert err is None, err
        acked.append((msg.offset(), msg.key(), msg.value()))  # type: ignore[attr-defined]

    for key, value in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(scaled(30)) == 0
    return sorted(acked)


def roll_after_segment_ms(bootstrap: str, topic: str, key: bytes = b"sentinel") -> Changelog:
    """Wait out segment.ms and produce one record: the active segment rolls, so
    everything before the record becomes cleanable."""
    time.sleep(SEGMENT_MS / 1000 + 0.05)
    return produce(bootstrap, topic, [(key, b"roll")])


def read_all(bootstrap: str, topic: str) -> Changelog:
    with Reader(bootstrap, topic, isolation="read_uncommitted") as reader:
        records = reader.read_to_end()[0]
    return [(o, k or b"", v or None) for o, k, v in records]


def read_with_tombstones(bootstrap: str, topic: str) -> Changelog:
    """Like ``read_all`` but keeps null values (``Reader`` requires values)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    admin_end = consumer.get_watermark_offsets(TopicPartition(topic, 0), scaled(10))[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: Changelog = []
    deadline = time.monotonic() + scaled(30)
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    if (msg.offset() or 0) >= admin_end:
                        return out
                    continue
                out.append((msg.offset(), msg.key(), msg.value()))  # type: ignore[arg-type]
                if (msg.offset() or 0) + 1 >= admin_end:
                    return out
        raise AssertionError(f"not read to {admin_end}: {len(out)} records")
    finally:
        consumer.close()


def latest(changelog: Changelog) -> dict[bytes, bytes]:
    state: dict[bytes, bytes | None] = {}
    for _, k, v in changelog:
        state[k] = v
    return {k: v for k, v in state.items() if v is not None}


def check_subset(read: Changelog, written: Changelog) -> None:
    """Offsets strictly increase and every record read is the one written at its offset."""
    by_offset = {o: (k, v) for o, k, v in written}
    offsets = [o for o, _, _ in read]
    assert offsets == sorted(set(offsets))
    for o, k, v in read:
        assert by_offset[o] == (k, v), f"offset {o}: read {(k, v)}, wrote {by_offset[o]}"


def test_changelog_compacts_to_the_latest_value_per_key(cleaning_broker: EmbeddedBroker,
                                                        topic_name: str) -> None:
    bootstrap = cleaning_broker.bootstrap_servers
    # How long tombstones stay: the test must see them within it, so it is scaled.
    delete_retention_ms = int(scaled(2000))
    create_compacted(bootstrap, topic_name, **{"delete.retention.ms": str(delete_retention_ms)})
    keys = [b"key-%04d" % i for i in range(1000)]
    rng = random.Random(5)
    updates = [(keys[rng.randrange(1000)] if i >= 1000 else keys[i], b"value-%06d" % i)
               for i in range(100_000)]
    written = produce(bootstrap, topic_name, updates)
    assert [o for o, _, _ in written] == list(range(100_000))
    written += roll_after_segment_ms(bootstrap, topic_name)

    def compacted() -> Changelog | None:
        read = read_all(bootstrap, topic_name)
        return read if len(read) == 1001 else None

    read = wait_for("the changelog to compact", compacted, timeout=60, interval=0.5)
    check_subset(read, written)
    assert latest(read) == latest(written)
    assert sorted(k for _, k, _ in read[:-1]) == keys  # exactly one record per key

    # Tombstones for 100 keys: kept for delete.retention.ms after their first clean (so
    # consumers see the deletes), then gone with every older value of their keys.
    deleted = keys[:100]
    written += produce(bootstrap, topic_name, [(k, None) for k in deleted])
    written += roll_after_segment_ms(bootstrap, topic_name, b"sentinel-2")

    def tombstones_cleaned() -> Changelog | None:
        read = read_with_tombstones(bootstrap, topic_name)
        return read if sum(v is None for _, _, v in read) == 100 and len(read) == 1002 else None

    read = wait_for("tombstones to replace the deleted keys", tombstones_cleaned, 30, 0.3)
    check_subset(read, written)
    seen_at = time.monotonic()

    def tombstones_gone() -> Changelog | None:
        read = read_with_tombstones(bootstrap, topic_name)
        return read if len(read) == 902 else None

    read = wait_for("tombstones to expire", tombstones_gone, timeout=30, interval=0.3)
    # Not before delete.retention.ms (less the time it took to see the tombstones).
    assert time.monotonic() - seen_at > delete_retention_ms / 2000
    check_subset(read, written)
    assert all(v is not None for _, _, v in read)
    assert not {k for _, k, _ in read} & set(deleted)
    assert latest(read) == latest(written)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before-commit", "after-commit", "after-swap"])
def test_kill_during_cleaning_loses_nothing(tmp_path: Path, point: str) -> None:
    crashing = [sys.executable, str(Path(__file__).with_name("crashing_broker.py")), point]
    with EmbeddedBroker(data_dir=tmp_path, extra_args=FAST_CLEANER, launcher=crashing) as broker:
        bootstrap = broker.bootstrap_servers
        # Not compacted while it is written: the broker must die in the pass that follows.
        create_compacted(bootstrap, "changelog", **{"segment.bytes": "2048",
                                                    "cleanup.policy": "delete",
                                                    "retention.ms": "-1"})
        rng = random.Random(point)
        written = produce(bootstrap, "changelog",
                          [(b"k%d" % rng.randrange(50), None if rng.random() < 0.1 else b"v%d" % i)
                           for i in range(1500)])
        set_configs(bootstrap, "changelog", {"cleanup.policy": "compact"})
        assert broker.process is not None
        broker.process.wait(scaled(30))  # the cleaner SIGKILLs the broker at the crash point
        assert broker.process.returncode == -9
        broker.launcher = [sys.executable, "-m", "headrace"]  # restart without the fault
        broker.start()
        read = read_with_tombstones(bootstrap, "changelog")
        check_subset(read, written)
        assert latest(read) == latest(written)
        # The cleaner finishes the job after the restart (all but the active segment).
        written += roll_after_segment_ms(bootstrap, "changelog")
        wait_for("cleaning to finish", lambda: len(read_with_tombstones(bootstrap, "changelog"))
                 <= 51, timeout=30, interval=0.3)
        read = read_with_tombstones(bootstrap, "changelog")
        check_subset(read, written)
        assert latest(read) == latest(written)


@pytest.mark.slow
def test_kill_at_random_moments_while_cleaning(tmp_path: Path) -> None:
    rng = random.Random(11)
    written: Changelog = []
    with EmbeddedBroker(data_dir=tmp_path, extra_args=FAST_CLEANER) as broker:
        bootstrap = broker.bootstrap_servers
        create_compacted(bootstrap, "changelog", **{"segment.bytes": "4096"})
        for round_ in range(3):
            written += produce(bootstrap, "changelog",
                               [(b"k%d" % rng.randrange(200), b"r%d-%d" % (round_, i))
                                for i in range(3000)])
            written += roll_after_segment_ms(bootstrap, "changelog", b"roll-%d" % round_)
            time.sleep(rng.uniform(0.0, 0.4))  # somewhere inside a cleaning pass
            broker.kill()
            broker.start()
            read = read_with_tombstones(bootstrap, "changelog")
            check_subset(read, written)
            assert latest(read) == latest(written)
        assert not list(tmp_path.glob("changelog-0/*.cleaned"))


def test_consumer_offsets_replay_after_cleaning(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, extra_args=FAST_CLEANER) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("events", 4, 1)])["events"].result(scaled(10))
        set_configs(bootstrap, "__consumer_offsets", {"segment.bytes": "4096",
                                                      "min.cleanable.dirty.ratio": "0.1"})
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g1",
                             "enable.auto.commit": False})
        for i in range(1, 801):
            consumer.commit(offsets=[TopicPartition("events", i % 4, i)], asynchronous=False)
        expected = {p: max(i for i in range(1, 801) if i % 4 == p) for p in range(4)}
        consumer.close()
        size_before = sum(f.stat().st_size for f in tmp_path.glob("__consumer_offsets-0/*.log"))
        wait_for("the offsets topic to shrink", lambda: sum(
            f.stat().st_size for f in tmp_path.glob("__consumer_offsets-0/*.log"))
            < size_before / 4, timeout=30, interval=0.3)
        broker.kill()
        broker.start()
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g1"})
        committed = consumer.committed([TopicPartition("events", p) for p in range(4)],
                                       scaled(10))
        consumer.close()
        assert {tp.partition: tp.offset for tp in committed} == expected


def test_transaction_state_and_aborted_data_after_cleaning(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, extra_args=FAST_CLEANER) as broker:
        bootstrap = broker.bootstrap_servers
        create_compacted(bootstrap, "txn-table", **{"segment.bytes": "2048",
                                                    "delete.retention.ms": "0"})
        set_configs(bootstrap, "__transaction_state", {"segment.bytes": "2048"})
        producer = transactional_producer(bootstrap, "table-writer")
        expected: dict[bytes, bytes] = {}
        for i in range(30):
            producer.begin_transaction()
            key = b"k%d" % (i % 10)
            producer.produce("txn-table", key=key, value=b"v%d" % i, partition=0)
            if i % 3 == 2:
                producer.abort_transaction(scaled(10))
            else:
                producer.commit_transaction(scaled(10))
                expected[key] = b"v%d" % i
        time.sleep(SEGMENT_MS / 1000 + 0.05)
        producer.begin_transaction()
        producer.produce("txn-table", key=b"roll", value=b"roll", partition=0)
        producer.commit_transaction(scaled(10))
        expected[b"roll"] = b"roll"

        def clean_enough() -> bool:
            with Reader(bootstrap, "txn-table", isolation="read_uncommitted") as reader:
                records = reader.read_to_end()[0]
            return len(records) <= 11

        wait_for("aborted and superseded records to be cleaned", clean_enough, 30, 0.3)
        # 90 state changes of one transactional id, compacted (all but the active segment).
        wait_for("the transaction log to be cleaned", lambda: sum(
            f.stat().st_size for f in tmp_path.glob("__transaction_state-0/*.log")) < 5000,
            timeout=30, interval=0.3)
        for isolation in ("read_committed", "read_uncommitted"):
            with Reader(bootstrap, "txn-table", isolation=isolation) as reader:
                records = reader.read_to_end()[0]
            assert {k: v for _, k, v in records if k is not None} == expected
        broker.kill()
        broker.start()
        # The coordinator replays the (cleaned) transaction log: the id keeps its producer
        # id and gets the next epoch, and the fenced old producer cannot commit.
        again = transactional_producer(bootstrap, "table-writer")
        again.begin_transaction()
        again.produce("txn-table", key=b"after", value=b"restart", partition=0)
        again.commit_transaction(scaled(10))
        expected[b"after"] = b"restart"
        with Reader(bootstrap, "txn-table") as reader:
            records = reader.read_to_end()[0]
        assert {k: v for _, k, v in records if k is not None} == expected


def test_every_client_reads_a_compacted_log(cleaning_broker: EmbeddedBroker,
                                            topic_name: str) -> None:
    """Gaps, batches starting after the offset asked for, emptied batches kept for the
    producer's sequence, tombstones: librdkafka, kafka-python, aiokafka and kcat all read
    the same records."""
    bootstrap = cleaning_broker.bootstrap_servers
    create_compacted(bootstrap, topic_name, **{"segment.bytes": "4096"})
    rng = random.Random(9)
    written = produce(bootstrap, topic_name, [
        (b"k%d" % rng.randrange(30), None if rng.random() < 0.1 else b"v%d" % i)
        for i in range(2000)])
    written += roll_after_segment_ms(bootstrap, topic_name)
    wait_for("compaction", lambda: len(read_with_tombstones(bootstrap, topic_name)) <= 31,
             timeout=30, interval=0.3)
    expected = [(o, k, v) for o, k, v in read_with_tombstones(bootstrap, topic_name)]
    check_subset(expected, written)
    for consume in (confluent_consume, kafka_python_consume, aiokafka_consume, kcat_consume):
        got = [(c.offset, c.key, c.value) for c in consume(bootstrap, topic_name, [0])]
        assert got == expected, consume.__name__
