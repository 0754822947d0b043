"""KIP-848 consumer group state survives a broker restart (clean stop and ``kill -9``), as
in Kafka, which keeps it in ``__consumer_offsets``: librdkafka members
(``group.protocol=consumer``) keep their member ids, epochs and assignments, and a member
that never comes back is fenced a session timeout after the restart, its partitions moving
to the one that did. ConsumerGroupDescribe before and after, as raw requests."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from headrace.protocol.errors import ErrorCode
from headrace.protocol.messages import ConsumerGroupDescribeRequest as Describe
from headrace.testing import EmbeddedBroker, scaled
from tests.integration.kip848_members import Member, check_never_owned_twice
from tests.integration.rawclient import RawClient
from tests.integration.test_groups import create_topic, wait_until

HEARTBEAT_MS = 200
PARTITIONS = 4

# A member in its own process, to be killed without leaving the group.
_CRASHER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.protocol": "consumer"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
"""


def describe(bootstrap: str, group: str, missing_ok: bool = False) -> dict[str, Any]:
    """Group epoch, assignment epoch, state and each member's (epoch, partitions); {} for
    a group not known (yet) with ``missing_ok``."""
    with RawClient(bootstrap) as c:
        (g,) = c.request(Describe(group_ids=[group], include_authorized_operations=False),
                         1).groups
    if missing_ok and g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return {}
    assert g.error_code == 0, g
    return {"state": g.group_state, "epoch": g.group_epoch,
            "assignment epoch": g.assignment_epoch,
            "members": {m.member_id: (m.member_epoch, sorted(
                p for t in m.assignment.topic_partitions for p in t.partitions))
                for m in g.members}}


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_members_keep_ids_epochs_and_assignments_across_a_restart(
        tmp_path: Path, topic_name: str, how: str) -> None:
    # The session must outlast the restart on a loaded machine (scaled); the test then
    # waits for it once, for the member that never comes back.
    session_ms = int(scaled(5000))
    with EmbeddedBroker(data_dir=tmp_path / "data", extra_args=[
            "--group-consumer-session-timeout-ms", str(session_ms),
            "--group-consumer-heartbeat-interval-ms", str(HEARTBEAT_MS)]) as broker:
        bs = broker.bootstrap_servers
        create_topic(bs, topic_name, PARTITIONS)
        group = f"g-{uuid.uuid4().hex[:8]}"
        journal: list[Any] = []
        a = Member(bs, group, [topic_name], journal, "a")
        crasher = subprocess.Popen([sys.executable, "-c", _CRASHER, bs, group, topic_name])
        try:
            def settled() -> dict[str, Any] | None:
                d = describe(bs, group, missing_ok=True)
                if not d:
                    return None
                counts = sorted(len(ps) for _, ps in d["members"].values())
                ok = d["state"] == "Stable" and counts == [2, 2] and len(a.owned) == 2
                return d if ok else None

            before = wait_until(settled, 30, "two members with two partitions each")
            a_id = next(m for m, (_, ps) in before["members"].items()
                        if set(ps) == {p for _, p in a.owned})
            crasher.kill()  # gone for good, without a leave
            crasher.wait(scaled(10))
            if how == "kill":
                broker.kill()
                broker.start()
            else:
                broker.restart()
            restarted = len(journal)
            assert describe(bs, group) == before
            # a's heartbeats are accepted as they were: same id, epoch and partitions.
            wait_until(lambda: a.owned and describe(bs, group)["members"][a_id]
                       == before["members"][a_id], 10, "a heartbeating again")
            assert [e for e in journal[restarted:] if e[1] == "revoke"] == []
            # The crashed member's session restarted with the load; when it expires, a
            # gets its partitions in a new epoch.
            after = wait_until(lambda: (d := describe(bs, group))["members"].keys() == {a_id}
                               and d["state"] == "Stable" and d, session_ms / 1000 + 30,
                               "the crashed member fenced and a owning every partition")
            assert after["epoch"] > before["epoch"]
            assert after["members"][a_id][1] == list(range(PARTITIONS))
            check_never_owned_twice(journal)
        finally:
            crasher.kill()
            crasher.wait(scaled(10))
            a.stop()
