"""Committed offsets expire (offsets.retention.minutes, KIP-211): a group's once it has been
empty for the retention, standalone commits (no join: manual commits, the exactly-once
sink's markers) that long after the commit; a live group keeps its offsets."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.txn_support import wait_for

RETENTION_S = 3.0
FAST_EXPIRY = ["--offsets-retention-minutes", str(RETENTION_S / 60),
               "--offsets-retention-check-interval-ms", "200"]


def committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=scaled(10))[0].offset)
    finally:
        c.close()


def standalone_commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def listed_groups(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_groups().result(scaled(10))
    return {g.group_id for g in result.valid}


def test_offsets_expire_after_retention_but_not_while_the_group_has_members(
        tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, extra_args=FAST_EXPIRY) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 1)])["t"].result(scaled(10))
        p = Producer({"bootstrap.servers": bootstrap})
        for i in range(5):
            p.produce("t", b"v%d" % i)
        p.flush(scaled(10))

        standalone_commit(bootstrap, "standalone", "t", 3)
        assert committed(bootstrap, "standalone", "t") == 3

        member = Consumer({"bootstrap.servers": bootstrap, "group.id": "live",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "session.timeout.ms": 6000})
        member.subscribe(["t"])
        read, deadline = 0, time.monotonic() + scaled(30)
        while read < 5:
            assert time.monotonic() < deadline, f"the member read only {read} records"
            if (m := member.poll(1.0)) is not None and not m.error():
                read += 1
        member.commit(asynchronous=False)
        started = time.monotonic()
        # The standalone commit goes after its retention; the live group keeps its offset.
        wait_for("the standalone offset to expire",
                 lambda: committed(bootstrap, "standalone", "t") < 0, timeout=30, interval=0.3)
        while time.monotonic() - started < 2 * RETENTION_S:
            member.poll(0.2)  # stays a member, well past the retention
        assert committed(bootstrap, "live", "t") == 5
        assert "standalone" not in listed_groups(bootstrap)

        member.close()  # the group becomes empty: its retention starts now
        emptied = time.monotonic()
        wait_for("the empty group's offsets to expire",
                 lambda: committed(bootstrap, "live", "t") < 0, timeout=30, interval=0.3)
        assert time.monotonic() - emptied >= RETENTION_S - 0.5
        wait_for("the expired group to be forgotten",
                 lambda: "live" not in listed_groups(bootstrap), timeout=10, interval=0.3)

        broker.restart()  # the expiry was written to __consumer_offsets: it stays expired
        assert committed(bootstrap, "live", "t") < 0
        assert committed(bootstrap, "standalone", "t") < 0
