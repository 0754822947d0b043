"""OffsetCommit v10 and OffsetFetch v10 (topics named by id) on both brokers, raw
requests: commits by id, an unknown id, fetches by id (named partitions, every committed
partition) and by name at v9. Topic ids differ between brokers: compared as labels."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from headrace.protocol.errors import ErrorCode
from tests.differential.conftest import Brokers
from tests.differential.support import create_topic, wait_for
from tests.integration.rawclient import RawClient

_CT = OffsetCommitRequest.OffsetCommitRequestTopic
_CP = _CT.OffsetCommitRequestPartition
_FG = OffsetFetchRequest.OffsetFetchRequestGroup
_FT = _FG.OffsetFetchRequestTopics
_RETRY = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
          ErrorCode.NOT_COORDINATOR}
UNKNOWN_ID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")


def _fetch(c: RawClient, group: str, topics: list[Any] | None, version: int,
           labels: dict[uuid.UUID | str, str]) -> list[Any]:
    r = c.request(OffsetFetchRequest(groups=[_FG(group_id=group, member_id=None, member_epoch=-1,
                                                 topics=topics)], require_stable=False), version)
    (g,) = r.groups
    return [g.error_code, sorted(
        (labels.get(uuid.UUID(str(t.topic_id)) if version >= 10 else t.name, "?"),
         [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
          for p in sorted(t.partitions, key=lambda p: p.partition_index)])
        for t in g.topics)]


def observe(bootstrap: str, topic: str) -> dict[str, Any]:
    create_topic(bootstrap, topic, 2)
    group = f"{topic}-group"
    with RawClient(bootstrap) as c:
        c.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        md = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=topic)], allow_auto_topic_creation=False), 12)
        topic_id = uuid.UUID(str(md.topics[0].topic_id))
        labels: dict[uuid.UUID | str, str] = {topic_id: "topic", topic: "topic",
                                              UNKNOWN_ID: "unknown"}

        def commit() -> Any:
            r = c.request(OffsetCommitRequest(
                group_id=group, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=[
                    _CT(topic_id=topic_id, partitions=[
                        _CP(partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                            committed_metadata="m0"),
                        _CP(partition_index=1, committed_offset=7, committed_leader_epoch=-1,
                            committed_metadata=None)]),
                    _CT(topic_id=UNKNOWN_ID, partitions=[
                        _CP(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                            committed_metadata="")])]), 10)
            codes = {p.error_code for t in r.topics for p in t.partitions}
            return None if codes & _RETRY else r

        committed = wait_for("a commit past coordinator loading", commit)
        return {
            "commit": sorted((labels[uuid.UUID(str(t.topic_id))],
                              [(p.partition_index, p.error_code) for p in t.partitions])
                             for t in committed.topics),
            "fetch by id": _fetch(c, group, [_FT(topic_id=topic_id, partition_indexes=[0, 1]),
                                             _FT(topic_id=UNKNOWN_ID, partition_indexes=[3])],
                                  10, labels),
            "fetch all by id": _fetch(c, group, None, 10, labels),
            "fetch by name at v9": _fetch(c, group, [_FT(name=topic, partition_indexes=[0, 1])],
                                          9, labels),
        }


def test_offset_commit_and_fetch_by_topic_id(brokers: Brokers, topic_name: str) -> None:
    seen = {name: observe(address, f"{topic_name}-{name}")
            for name, address in brokers.each().items()}
    unknown = ErrorCode.UNKNOWN_TOPIC_ID
    assert seen["kafka"]["commit"] == [("topic", [(0, 0), (1, 0)]), ("unknown", [(0, unknown)])]
    offsets = [("topic", [(0, 5, "m0", 0), (1, 7, "", 0)])]
    assert seen["kafka"]["fetch all by id"] == [0, offsets]
    assert seen["kafka"]["fetch by name at v9"] == [0, offsets]
    assert seen["headrace"] == seen["kafka"]
