"""KIP-848 group records: Kafka's key layout, and a group rebuilt from its records."""

from __future__ import annotations

import struct
import uuid

from headrace.broker.groups.consumer_group import ConsumerGroup, ConsumerMember, MemberState
from headrace.broker.groups.consumer_records import (
    CURRENT_MEMBER,
    GROUP_METADATA,
    Key,
    decode_group,
    decode_key,
    encode_group,
    encode_key,
)

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def test_keys_are_kafkas_record_type_then_strings() -> None:
    assert encode_key(Key(GROUP_METADATA, "g")) == b"\x00\x03\x00\x01g"
    assert encode_key(Key(CURRENT_MEMBER, "g", "m")) == b"\x00\x08\x00\x01g\x00\x01m"
    assert decode_key(b"\x00\x08\x00\x01g\x00\x01m") == Key(CURRENT_MEMBER, "g", "m")
    assert decode_key(struct.pack(">h", 1) + b"\x00\x01g") is None  # an offset commit


def test_a_group_round_trips_through_its_records() -> None:
    group = ConsumerGroup("g", group_epoch=7, assignment_epoch=6,
                          subscribed={T1: 3, T2: 1}, target={"a": {T1: frozenset({0, 1})},
                                                             "b": {T1: frozenset({2})}})
    a = ConsumerMember("a", "static-a", "rack-1", "client-a", "/10.0.0.1", 30_000,
                       ("t1", "t2"), None, "range", member_epoch=6, previous_member_epoch=5,
                       state=MemberState.UNREVOKED_PARTITIONS,
                       assigned={T1: frozenset({0, 1})},
                       pending_revocation={T2: frozenset({0})})
    b = ConsumerMember("b", None, None, "client-b", "/10.0.0.2", 45_000, (), "t.*",
                       member_epoch=-2, previous_member_epoch=6)
    group.members = {"a": a, "b": b}
    group.static_members = {"static-a": "a"}
    records = encode_group(group, {T1: "t1", T2: "t2"})
    assert len(records) == 3 + 3 * 2
    back = decode_group("g", {k: v for raw, v in records.items()
                              if (k := decode_key(raw)) is not None})
    assert (back.group_epoch, back.assignment_epoch, back.subscribed, back.target) == (
        7, 6, group.subscribed, group.target)
    assert back.static_members == {"static-a": "a"}
    for m in (a, b):
        r = back.members[m.member_id]
        assert (r.instance_id, r.rack_id, r.client_id, r.client_host, r.rebalance_timeout_ms,
                r.subscribed_topic_names, r.subscribed_topic_regex, r.server_assignor,
                r.member_epoch, r.previous_member_epoch, r.state, r.assigned,
                r.pending_revocation) == (
            m.instance_id, m.rack_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
            m.subscribed_topic_names, m.subscribed_topic_regex, m.server_assignor,
            m.member_epoch, m.previous_member_epoch, m.state, m.assigned,
            m.pending_revocation)
    # KIP-1251's epochs are not stored: owned partitions count as got at the current epoch.
    assert back.members["a"].partition_epochs == {(T1, 0): 6, (T1, 1): 6, (T2, 0): 6}
