"""The Java client (kafka-clients 4.4.0; 3.9.2 for producer and consumer) against headrace.

Each test runs one scenario of the driver in ``jvm/clients`` (``tests/compat/java.py``) in
a fresh JVM and asserts the exact observations it prints. Every scenario also runs against
a real Apache Kafka 4.3.1 (KRaft, session-scoped), which proves the scenario and its
expected values right; where the two brokers legitimately differ (node ids, documented
headrace choices) the expectation says so. Topics are fresh per test (``topic_name``).
"""

from __future__ import annotations

from typing import Any

import pytest
from kafka.partitioner.default import murmur2

from headrace.testing import ApacheKafka, EmbeddedBroker
from tests.compat.java import JavaClient
from tests.compat.wire import assert_idempotent_batches, assert_stored_codec

BASE = 1_700_000_000_000  # Clients.BASE_TIMESTAMP
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
@pytest.fixture
def java(request: pytest.FixtureRequest) -> JavaClient:
    """The driver against ``headrace`` or ``kafka``, optionally ``@3.9.2`` (the client
    Spark's connector uses)."""
    target, _, version = str(request.param).partition("@")
    if target == "headrace":
        b: EmbeddedBroker = request.getfixturevalue("broker")
        return JavaClient("headrace", b.bootstrap_servers, 0, version or "4.4.0", b.output_lines)
    k: ApacheKafka = request.getfixturevalue("apache_kafka")
    return JavaClient("kafka", k.bootstrap_servers, 1, version or "4.4.0", k.output_lines)


BOTH = pytest.mark.parametrize("java", ["headrace", "kafka"], indirect=True)
BOTH_AND_OLD = pytest.mark.parametrize(
    "java", ["headrace", "kafka", "headrace@3.9.2"], indirect=True
)


def by_position(records: list[Any]) -> list[Any]:
    return sorted(
        records,
        key=lambda r: (r["partition"], r["offset"]) if isinstance(r, dict) else tuple(r[:2]),
    )


# --- producer ---------------------------------------------------------------------------


def produced(codec: str, i: int) -> dict[str, Any]:
    """Record ``i`` as ``ProducerScenarios.record`` builds it, with the partition it must
    land on: the explicit one for null keys, else murmur2 (Java's default partitioner)."""
    keyless = i % 10 == 9
    key = None if keyless else f"key-{i % 7}"
    headers: list[list[str | None]] = []
    if i % 3 == 0:
        headers = [["trace", f"t{i}"], ["trace", "dup"]]
    elif i % 3 == 1:
        headers = [["nullable", None]]
    elif i == 2:
        headers = [["\u00fcn\u00efcode", "\u2713"]]
    partition = i % 3 if key is None else (murmur2(key.encode()) & 0x7FFFFFFF) % 3
    return {
        "partition": partition,
        "key": key,
        "value": f"value-{codec}-{i}" * 4,
        "timestamp": BASE + 1000 * i,
        "timestamp_type": "CreateTime",
        "headers": headers,
    }


@BOTH_AND_OLD
def test_idempotent_producer_every_codec(java: JavaClient, topic_name: str) -> None:
    """acks=all, idempotent: delivery-callback offsets are exact (per partition, in send
    order, from 0); keyed records on their murmur2 partition; headers (null values, repeated
    and non-ASCII names) and explicit timestamps read back unchanged; the stored batches are
    in the codec and carry one producer id with gap-free sequences."""
    result = java.run("produce", topic_name)
    assert list(result) == list(CODECS)
    for codec in CODECS:
        expected, next_offset = [], [0, 0, 0]
        for i in range(30):
            r = produced(codec, i)
            r["offset"] = next_offset[r["partition"]]
            next_offset[r["partition"]] += 1
            expected.append(r)
        got = result[codec]
        assert got["delivered"] == [[r["partition"], r["offset"], r["timestamp"]] for r in expected]
        assert by_position(got["consumed"]) == by_position(expected)
        topic = got["topic"]  # TOPIC-CODEC (TOPIC-again-CODEC after a retry on the reference)
        assert topic.startswith(topic_name) and topic.endswith(f"-{codec}")
        assert_stored_codec(java.bootstrap, topic, range(3), codec)
        assert_idempotent_batches(java.bootstrap, topic, range(3))


@BOTH_AND_OLD
def test_transactions_and_consume_transform_produce(java: JavaClient, topic_name: str) -> None:
    """Commit, abort (markers take an offset each), the LSO of an open transaction, and
    sendOffsetsToTransaction: read_committed sees only committed records, the group's
    offsets advance with the committed transaction and not with the aborted one."""
    result = java.run("transactions", topic_name)
    transformed = result["transformed"]
    assert sorted(transformed[:6]) == [f"IN-{i}" for i in range(6)]
    assert sorted(transformed[6:]) == ["IN-6", "IN-7"]
    # out: c0-c2 0-2, commit 3; a0 a1 4-5, abort 6; c3 7, commit 8; IN-0..5 9-14, commit 15;
    # IN-6/7 16-17, abort 18
    committed = [
        [0, "c0"],
        [1, "c1"],
        [2, "c2"],
        [7, "c3"],
        *([9 + i, v] for i, v in enumerate(transformed[:6])),
    ]
    assert result == {
        "open_txn_end_offsets": {"read_committed": 7, "read_uncommitted": 8},
        "transformed": transformed,
        "group_committed": {"0": 3, "1": 3},
        "read_committed": {"records": committed, "position": 19},
        "read_uncommitted": {
            "records": sorted(
                [*committed, [4, "a0"], [5, "a1"], [16, transformed[6]], [17, transformed[7]]]
            ),
            "position": 19,
        },
    }


# --- consumer ---------------------------------------------------------------------------


@BOTH_AND_OLD
def test_positions_seeks_and_offsets_for_times(java: JavaClient, topic_name: str) -> None:
    """p0: v0..v9 in one batch at BASE+i*1000; p1: w0..w4."""
    result = java.run("positions", topic_name)
    result["after_seek"] = by_position(result["after_seek"])
    times = {str(BASE + 1000 * i): [i, BASE + 1000 * i] for i in range(10)}
    times |= {str(BASE - 1): [0, BASE], str(BASE + 2500): [3, BASE + 3000], str(BASE + 9001): None}
    assert result == {
        "beginning_offsets": [0, 0],
        "end_offsets": [10, 5],
        "position_after_seek_to_end": 10,
        "after_seek": [*([0, i, f"v{i}"] for i in range(4, 10)), [1, 3, "w3"], [1, 4, "w4"]],
        "position_after_seek_to_beginning": 0,
        "after_reassign_and_seek": [[0, 8, "v8"], [0, 9, "v9"]],
        "offsets_for_times": times,
    }


@BOTH_AND_OLD
def test_commits_and_resume(java: JavaClient, topic_name: str) -> None:
    """commitSync/commitAsync with metadata, committed(), a new consumer resuming there,
    commitSync() of positions, and the Admin view of the group's offsets."""
    result = java.run("commits", topic_name)
    everything = [*([0, i, f"v{i}"] for i in range(10)), *([1, i, f"w{i}"] for i in range(5))]
    assert by_position(result.pop("first_read")) == everything
    assert by_position(result.pop("resumed_read")) == [
        *([0, i, f"v{i}"] for i in range(3, 10)),
        *([1, i, f"w{i}"] for i in range(2, 5)),
    ]
    assert result == {
        "commit_async_callback": {"1": [2, "async"]},
        "committed_1": {"0": [3, "sync"], "1": [2, "async"]},
        "committed_2": {"0": [10, ""], "1": [5, ""]},
        "admin_offsets": {"0": [10, ""], "1": [5, ""]},
    }


def assert_read_once(a: dict[str, Any], b: dict[str, Any], first: int = 5) -> None:
    """Every record of the 4 partitions x 10 read exactly once: a alone read offsets below
    ``first``, after the rebalance each member read the rest of its own partitions."""
    consumed = [tuple(r) for r in a["consumed"] + b["consumed"]]
    assert sorted(consumed) == [(p, o) for p in range(4) for o in range(10)]
    assert sorted(tuple(r) for r in a["consumed"][: 4 * first]) == [
        (p, o) for p in range(4) for o in range(first)
    ]
    for m in (a, b):
        later = m["consumed"][4 * first :] if m is a else m["consumed"]
        assert sorted(tuple(r) for r in later) == [
            (p, o) for p in m["assignment"] for o in range(first, 10)
        ]


@BOTH_AND_OLD
def test_range_and_cooperative_sticky_assignors(java: JavaClient, topic_name: str) -> None:
    """Classic protocol, two members in one JVM: a joins alone and reads 20 records, b joins,
    20 more. Range (eager) revokes everything and splits [0,1]/[2,3] by member id order;
    cooperative-sticky revokes only what moves to b, over two rebalances."""
    result = java.run("assignors", topic_name)
    r, c = result["range"], result["cooperative-sticky"]
    assert_read_once(r["a"], r["b"])
    assert (r["a"]["assignment"], r["b"]["assignment"]) == ([0, 1], [2, 3])
    assert r["a"]["events"] == [
        {"assigned": [0, 1, 2, 3]},
        {"revoked": [0, 1, 2, 3]},
        {"assigned": [0, 1]},
    ]
    assert r["b"]["events"] == [{"assigned": [2, 3]}]
    assert r["a"]["generation"] == r["b"]["generation"] == 2

    assert_read_once(c["a"], c["b"])
    moved = c["b"]["assignment"]
    assert len(moved) == 2
    assert c["a"]["assignment"] == sorted(set(range(4)) - set(moved))
    assert c["a"]["events"] == [{"assigned": [0, 1, 2, 3]}, {"revoked": moved}]
    assert c["b"]["events"] == [{"assigned": moved}]
    assert c["a"]["generation"] == c["b"]["generation"] == 3


@BOTH_AND_OLD
def test_static_membership_rejoin_keeps_assignment(java: JavaClient, topic_name: str) -> None:
    """A static member (group.instance.id) that closes and comes back under a new member id
    gets its partitions back in the same generation; the other member sees no rebalance."""
    result = java.run("static-membership", topic_name)
    before, after, b, b2 = result["a_before"], result["a_after"], result["b"], result["b2"]
    a_events = [{"assigned": [0, 1, 2, 3]}, {"revoked": [0, 1, 2, 3]}, {"assigned": [0, 1]}]
    for a in (before, after):
        assert (a["assignment"], a["events"], a["generation"]) == ([0, 1], a_events, 2)
    assert after["member_id"] == before["member_id"]
    assert (b["assignment"], b["generation"]) == ([2, 3], 2)
    assert (b2["assignment"], b2["events"], b2["generation"]) == ([2, 3], [{"assigned": [2, 3]}], 2)
    assert b2["member_id"] != b["member_id"]
    assert b["member_id"].startswith("static-b-") and b2["member_id"].startswith("static-b-")
    assert sorted(map(tuple, after["consumed"])) == [(p, o) for p in (0, 1) for o in range(5)]
    assert sorted(map(tuple, b2["consumed"])) == [(p, o) for p in (2, 3) for o in range(5)]


@BOTH
def test_consumer_group_protocol(java: JavaClient, topic_name: str) -> None:
    """group.protocol=consumer (KIP-848): the broker assigns (uniform), a gives up what moves
    to b, offsets are committed, and when b leaves a owns every partition again."""
    result = java.run("consumer-protocol", topic_name)
    a, b = result["a"], result["b"]
    moved = b["assignment"]
    kept = sorted(set(range(4)) - set(moved))
    assert len(moved) == 2
    assert result["described"] == {
        "type": "Consumer",
        "state": "Stable",
        "members": {a["member_id"]: kept, b["member_id"]: moved},
    }
    assert a["assignment"] == [0, 1, 2, 3]
    assert a["events"] == [{"assigned": [0, 1, 2, 3]}, {"revoked": moved}, {"assigned": moved}]
    assert b["events"] == [{"assigned": moved}]
    consumed = sorted(tuple(r) for r in a["consumed"] + b["consumed"])
    assert consumed == [(p, o) for p in range(4) for o in range(10)]
    assert sorted(tuple(r) for r in b["consumed"]) == [(p, o) for p in moved for o in range(5, 10)]
    assert result["committed"] == {str(p): [10, ""] for p in range(4)}


# --- admin ------------------------------------------------------------------------------


@BOTH
def test_admin(java: JavaClient, topic_name: str) -> None:
    """The 4.x Admin client end to end (AdminScenarios.admin, one key per step)."""
    result, topic_name = java.run_on("admin", topic_name)
    a, b, node = f"{topic_name}-a", f"{topic_name}-b", java.node_id
    port = int(java.bootstrap.rsplit(":", 1)[1])
    headrace = java.broker == "headrace"
    described = {
        "name": a,
        "internal": False,
        "topic_id_set": True,
        "partitions": [
            {"partition": p, "leader": node, "replicas": [node], "isr": [node]} for p in range(3)
        ],
    }
    max_bytes = ["1048588", "DEFAULT_CONFIG"]
    assert result == {
        "cluster": {
            "cluster_id_set": True,
            "controller": node,
            "nodes": [[node, "127.0.0.1", port]],
        },
        "create": {"topic_id_set": True, "partitions": 3, "replication_factor": 1},
        "create_again": "TopicExistsException",
        "create_rf2": "InvalidReplicationFactorException",
        "describe": described,
        "describe_id_matches": True,
        "describe_by_id": described,
        "list_topics_has_a": True,
        "configs": {
            "cleanup.policy": ["delete", "DYNAMIC_TOPIC_CONFIG"],
            "max.message.bytes": max_bytes,
            "retention.ms": ["3600000", "DYNAMIC_TOPIC_CONFIG"],
        },
        # message.max.bytes is a dynamic broker config on both, at its default
        "broker_config": {"source": "DEFAULT_CONFIG", "read_only": False, "value_set": True},
        # headrace stores list configs canonically (sorted); Kafka keeps the APPEND order
        "configs_after_set_append": {
            "cleanup.policy": [
                "compact,delete" if headrace else "delete,compact",
                "DYNAMIC_TOPIC_CONFIG",
            ],
            "max.message.bytes": max_bytes,
            "retention.ms": ["7200000", "DYNAMIC_TOPIC_CONFIG"],
        },
        "configs_after_delete_subtract": {
            "cleanup.policy": ["compact", "DYNAMIC_TOPIC_CONFIG"],
            "max.message.bytes": max_bytes,
            "retention.ms": ["604800000", "DEFAULT_CONFIG"],
        },
        "alter_unknown_config": "InvalidConfigurationException",
        "create_partitions": "ok",
        "partitions_after": 5,
        "shrink_partitions": "InvalidPartitionsException",
        # b: timestamps 1000, 5000, 2000, 3000
        "list_offsets": {
            "earliest": [0, -1],
            "latest": [4, -1],
            "max_timestamp": [1, 5000],
            "for_timestamp_2500": [1, 5000],
            "for_timestamp_5000": [1, 5000],
            "for_timestamp_6000": [-1, -1],
        },
        "delete_records": 2,
        "list_offsets_after_delete": {"earliest": [2, -1]},
        "log_dirs": {
            "dirs": 1,
            "replicas_of_b0": [
                {"size_positive": True, "offset_lag": 0, "is_future": False, "error": None}
            ],
        },
        "groups_listed_active": [{"type": "Classic", "state": "Stable", "protocol": "consumer"}],
        "group_described": {
            "state": "Stable",
            "type": "Classic",
            "assignor": "range",
            "simple": False,
            "coordinator": node,
            "members": [{"client_id_set": True, "assignment": [f"{b}-0"]}],
        },
        "delete_active_group": "GroupNotEmptyException",
        "groups_listed_empty": [{"type": "Classic", "state": "Empty", "protocol": "consumer"}],
        "group_offsets": {"0": [4, ""]},
        "delete_group": "ok",
        "groups_listed_deleted": [],
        # both answer DescribeGroups v6 for an unknown group with GROUP_ID_NOT_FOUND
        "group_described_deleted": "GroupIdNotFoundException",
        "delete_topics": "ok",
        "describe_deleted": "UnknownTopicOrPartitionException",
        "describe_deleted_by_id": "UnknownTopicIdException",
        "delete_again": "UnknownTopicOrPartitionException",
    }
