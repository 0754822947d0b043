"""Compaction outcome: the same changelog (several versions per key, tombstones) into a
compacted topic on both brokers; once each has cleaned everything before the active
segment, the surviving records (offset, key, value) and the watermarks must match.
The cleaners' timing differs, so only the outcome is compared."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer

from headrace.testing import scaled
from tests.differential.conftest import Brokers
from tests.differential.support import create_topic, poll_until, read_partition, watermarks

SEGMENT_MS = 300
CONFIGS = {"cleanup.policy": "compact", "segment.ms": str(SEGMENT_MS),
           "min.cleanable.dirty.ratio": "0.01", "segment.bytes": "1048576"}


def changelog() -> list[tuple[bytes, bytes | None]]:
    out: list[tuple[bytes, bytes | None]] = []
    for version in range(5):
        for k in range(20):
            tombstone = k % 7 == 3 and version == 4
            out.append((f"key-{k}".encode(), None if tombstone else f"v{version}-{k}".encode()))
    out.append((b"key-5", None))
    out.append((b"key-5", b"reborn"))
    return out


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    errors: list[KafkaError] = []
    for key, value in records:
        producer.produce(topic, value=value, key=key, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(scaled(30)) == 0
    assert not errors


def compacted(bootstrap: str, topic: str, head_end: int) -> list[tuple[int, bytes | None,
                                                                       bytes | None]] | None:
    """The records once every key before ``head_end`` has one version left, else None."""
    rows = [(o, k, v) for o, k, v, _, _ in read_partition(bootstrap, topic)]
    keys = [k for o, k, _ in rows if o < head_end]
    return rows if len(keys) == len(set(keys)) else None


def observe(bootstrap: str, topic: str) -> dict[str, object]:
    create_topic(bootstrap, topic, configs=CONFIGS)
    records = changelog()
    produce(bootstrap, topic, records)
    # Past segment.ms, one more append rolls the segment: all of the above is cleanable.
    time.sleep(SEGMENT_MS / 1000 + 0.1)
    produce(bootstrap, topic, [(b"sentinel", b"roll")])
    rows = poll_until(f"{topic} compacted", lambda: compacted(bootstrap, topic, len(records)),
                      timeout=60, interval=0.3)
    return {"rows": rows, "watermarks": watermarks(bootstrap, topic)}


@pytest.mark.slow
def test_compaction_outcome_matches(brokers: Brokers, topic_name: str) -> None:
    reference = observe(brokers.kafka, topic_name)
    ours = observe(brokers.headrace, topic_name)
    assert ours == reference
    rows = reference["rows"]
    assert isinstance(rows, list)
    surviving = {k: v for _, k, v in rows}
    assert surviving[b"key-5"] == b"reborn"
    assert surviving[b"key-3"] is None  # tombstones stay for delete.retention.ms (1 day)
    assert reference["watermarks"] == (0, 103)
