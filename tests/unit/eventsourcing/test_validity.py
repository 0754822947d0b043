"""The rule of which records are events (``validity.classify``), record by record."""

from __future__ import annotations

from headrace.eventsourcing import Quarantined, StoredEvent
from headrace.eventsourcing.validity import classify
from headrace.protocol.partitioner import java_partition

PARTITIONS = 4
HOME = java_partition(b"acc-1", PARTITIONS)


def envelope(aggregate_id: str, version: int) -> bytes:
    return StoredEvent(aggregate_id, "Account", version, "MoneyDeposited", 2, {"amount": 1},
                       f"c{version}", 1_764_028_800_000).envelope()


def verdict(key: bytes | None, value: bytes | None, partition: int = HOME,
            at: int = 2) -> StoredEvent | Quarantined:
    return classify("bank.events", PARTITIONS, key, value, partition, 7, lambda _id: at)


def test_the_next_version_in_its_partition_is_an_event() -> None:
    ev = verdict(b"acc-1", envelope("acc-1", 3))
    assert isinstance(ev, StoredEvent) and (ev.version, ev.partition, ev.offset) == (3, HOME, 7)


def test_everything_else_is_quarantined_with_its_coordinates() -> None:
    cases = {
        "already has version 2": verdict(b"acc-1", envelope("acc-1", 2)),
        "skips ahead of version 2": verdict(b"acc-1", envelope("acc-1", 5)),
        "is not its aggregate id": verdict(b"acc-2", envelope("acc-1", 3)),
        f"belong in partition {HOME}": verdict(b"acc-1", envelope("acc-1", 3),
                                               partition=(HOME + 1) % PARTITIONS),
        "not an event envelope": verdict(b"acc-1", b'{"id": "acc-1"}'),
    }
    for reason, q in cases.items():
        assert isinstance(q, Quarantined), reason
        assert reason in q.reason and (q.topic, q.offset) == ("bank.events", 7)
        assert f"bank.events[{q.partition}] offset 7 is quarantined" in q.describe()
    dup = cases["already has version 2"]
    assert isinstance(dup, Quarantined) and (dup.aggregate_id, dup.version, dup.expected) == (
        "acc-1", 2, 3)
    assert isinstance(verdict(None, None), Quarantined)
