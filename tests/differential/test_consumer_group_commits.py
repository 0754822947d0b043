"""KIP-848 offset commits during a rebalance, raw requests on both brokers (KIP-1251).

Member a owns four partitions; b joins; a gives up two and moves to a new member epoch.
A client learns its new epoch only from the heartbeat's answer, so a commit already on
its way still carries the old epoch: Apache Kafka 4.3 accepts it for the partitions a
owned at that epoch and still owns, and answers STALE_MEMBER_EPOCH otherwise. The Java
client's ``commitSync`` right after the acknowledging heartbeat hits exactly this.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from headrace.protocol.errors import ErrorCode
from headrace.protocol.messages import ConsumerGroupHeartbeatRequest as HB
from tests.differential.conftest import Brokers
from tests.differential.support import create_topic, wait_for
from tests.integration.rawclient import RawClient

_CT = OffsetCommitRequest.OffsetCommitRequestTopic
_CP = _CT.OffsetCommitRequestPartition
_TP = HB.TopicPartitions
# Kafka answers these while its coordinator loads __consumer_offsets.
_RETRY = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
          ErrorCode.NOT_COORDINATOR}


class _Member:
    """One KIP-848 member driven by hand: what it owns follows the answers it gets."""

    def __init__(self, c: RawClient, group: str, topic: str, topic_id: uuid.UUID) -> None:
        self.c, self.group, self.topic, self.topic_id = c, group, topic, topic_id
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned: set[int] = set()

    def beat(self, report: set[int] | None) -> Any:
        """One heartbeat reporting ``report`` as owned (None: unchanged); retried while
        the coordinator loads."""
        joining = self.epoch == 0
        tps = None if report is None else [_TP(topic_id=self.topic_id,
                                                partitions=sorted(report))]

        def answer() -> Any:
            r = self.c.request(HB(
                group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
                instance_id=None, rack_id=None,
                rebalance_timeout_ms=30000 if joining else -1,
                subscribed_topic_names=[self.topic] if joining else None,
                subscribed_topic_regex=None, server_assignor=None,
                topic_partitions=[] if joining else tps), 1)
            return None if r.error_code in _RETRY else r

        r = wait_for("a heartbeat past coordinator loading", answer)
        assert r.error_code == 0, r
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.owned = {p for tp in r.assignment.topic_partitions for p in tp.partitions}
        return r

    def beat_until(self, what: str, done: Callable[[], bool], report: set[int] | None) -> None:
        """Heartbeat (reporting ``report``) until ``done()``."""
        def step() -> bool:
            if done():
                return True
            self.beat(report)
            return False
        wait_for(what, step)

    def commit(self, epoch: int, partitions: set[int]) -> list[int]:
        r = self.c.request(OffsetCommitRequest(
            group_id=self.group, generation_id_or_member_epoch=epoch, member_id=self.member_id,
            group_instance_id=None, retention_time_ms=-1, topics=[_CT(name=self.topic, partitions=[
                _CP(partition_index=p, committed_offset=0, committed_leader_epoch=-1,
                    committed_metadata="") for p in sorted(partitions)])]), 9)
        return sorted({int(p.error_code) for t in r.topics for p in t.partitions})


def observe(bootstrap: str, topic: str) -> dict[str, Any]:
    create_topic(bootstrap, topic, 4)
    group = f"{topic}-group"
    with RawClient(bootstrap) as c:
        c.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        md = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=topic)], allow_auto_topic_creation=False), 12)
        topic_id = uuid.UUID(str(md.topics[0].topic_id))
        a = _Member(c, group, topic, topic_id)
        a.beat(set())
        a.beat_until("a owning every partition", lambda: a.owned == {0, 1, 2, 3}, None)
        a.beat(a.owned)
        old = a.epoch
        b = _Member(c, group, topic, topic_id)
        b.beat(set())
        a.beat_until("a told to give up partitions", lambda: len(a.owned) < 4, {0, 1, 2, 3})
        kept, revoked = set(a.owned), {0, 1, 2, 3} - a.owned
        told_epoch = a.epoch
        a.beat_until("a moved to a new epoch", lambda: a.epoch > old, kept)
        return {
            "epoch unchanged while revoking": told_epoch == old,
            "kept": len(kept), "new epoch": a.epoch - old,
            "old epoch, kept partitions": a.commit(old, kept),
            "old epoch, a revoked partition": a.commit(old, {min(revoked)}),
            "old epoch, kept and revoked": a.commit(old, kept | revoked),
            "current epoch, kept": a.commit(a.epoch, kept),
            "current epoch, revoked": a.commit(a.epoch, revoked),
            "newer epoch": a.commit(a.epoch + 1, kept),
            "before the partitions were assigned": a.commit(old - 1, kept),
            "b at its epoch": b.commit(b.epoch, b.owned) if b.owned else [0],
        }


def test_commit_with_the_epoch_before_a_rebalance(brokers: Brokers, topic_name: str) -> None:
    seen = {name: observe(address, f"{topic_name}-{name}")
            for name, address in brokers.each().items()}
    stale = [ErrorCode.STALE_MEMBER_EPOCH]
    assert seen["kafka"] == {
        "epoch unchanged while revoking": True, "kept": 2, "new epoch": 1,
        "old epoch, kept partitions": [0],
        "old epoch, a revoked partition": stale,
        "old epoch, kept and revoked": stale,
        "current epoch, kept": [0],
        "current epoch, revoked": [0],  # at the member's epoch Kafka checks no partition
        "newer epoch": stale,
        "before the partitions were assigned": stale,
        "b at its epoch": [0],
    }
    assert seen["headrace"] == seen["kafka"]
