"""Bad requests sent raw (``RawClient``) to both brokers: each must get the same Kafka
error code from headrace as from Apache Kafka, and a malformed frame must close that one
connection while the broker keeps serving others. Error messages are not compared (they
are free text); codes, offsets and whether the connection survives are."""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

import crc32c
import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka.protocol.admin import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeGroupsRequest,
)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
)

from headrace.protocol.records import build_batch, encode_record
from tests.differential.conftest import Brokers
from tests.differential.support import create_topic, poll_until
from tests.integration.rawclient import RawClient
from tests.integration.txn_support import Stalled

NOT_LEADER_OR_FOLLOWER = 6
RETRIABLE_COORDINATOR = {14, 15, 16, 51}  # load in progress, not available, not coordinator,
#                                           concurrent transactions


def produce(c: RawClient, topic: str, records: bytes, version: int = 9,
            transactional_id: str | None = None) -> tuple[int, int]:
    P = ProduceRequest
    req = P(transactional_id=transactional_id, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[
            P.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    part = c.request(req, version).responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def fetch(c: RawClient, topic: str, offset: int = 0) -> tuple[int, int]:
    F = FetchRequest
    req = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[
                F.FetchTopic(topic=topic, partitions=[F.FetchTopic.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset,
                    log_start_offset=-1, partition_max_bytes=1 << 20)])])
    resp = c.request(req, 12)
    part = resp.responses[0].partitions[0]
    return int(part.error_code), int(part.high_watermark)


def list_offsets(c: RawClient, topic: str) -> int:
    L = ListOffsetsRequest
    req = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=topic, partitions=[
        L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                timestamp=-1)])])
    return int(c.request(req, 7).topics[0].partitions[0].error_code)


def create_topics(c: RawClient, topic: str, partitions: int = 1, replication: int = 1,
                  configs: dict[str, str] | None = None, validate_only: bool = False) -> int:
    C = CreateTopicsRequest
    req = C(timeout_ms=10000, validate_only=validate_only, topics=[C.CreatableTopic(
        name=topic, num_partitions=partitions, replication_factor=replication, assignments=[],
        configs=[C.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                 for k, v in (configs or {}).items()])])
    return int(c.request(req, 7).topics[0].error_code)


def alter_configs(c: RawClient, topic: str, configs: dict[str, str]) -> int:
    A = AlterConfigsRequest
    req = A(validate_only=False, resources=[A.AlterConfigsResource(
        resource_type=2, resource_name=topic, configs=[
            A.AlterConfigsResource.AlterableConfig(name=k, value=v)
            for k, v in configs.items()])])
    return int(c.request(req, 2).responses[0].error_code)


def create_partitions(c: RawClient, topic: str, count: int) -> int:
    C = CreatePartitionsRequest
    req = C(timeout_ms=10000, validate_only=False, topics=[
        C.CreatePartitionsTopic(name=topic, count=count, assignments=None)])
    return int(c.request(req, 3).results[0].error_code)


def frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def healthy(bootstrap: str) -> bool:
    with RawClient(bootstrap) as c:
        r = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
        return len(r.brokers) == 1


def init_producer_id(c: RawClient, transactional_id: str) -> tuple[int, int]:
    """(producer id, epoch) once the transaction coordinator answers."""
    def attempt() -> tuple[int, int] | None:
        found = c.request(FindCoordinatorRequest(key_type=1, coordinator_keys=[transactional_id]),
                          4).coordinators[0]
        if found.error_code in RETRIABLE_COORDINATOR:
            return None
        assert found.error_code == 0, found
        r = c.request(InitProducerIdRequest(transactional_id=transactional_id,
                                            transaction_timeout_ms=60_000), 4)
        if r.error_code in RETRIABLE_COORDINATOR:
            return None
        assert r.error_code == 0, r
        return int(r.producer_id), int(r.producer_epoch)
    result: tuple[int, int] = poll_until("transaction coordinator", attempt, interval=0.1)
    return result


def add_partitions(c: RawClient, txn: str, pid: int, epoch: int, topic: str) -> int:
    A = AddPartitionsToTxnRequest
    req = A(v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                A.AddPartitionsToTxnTopic(name=topic, partitions=[0])])
    r = c.request(req, 3)
    return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def end_txn(c: RawClient, txn: str, pid: int, epoch: int, commit: bool) -> int:
    return int(c.request(EndTxnRequest(transactional_id=txn, producer_id=pid,
                                       producer_epoch=epoch, committed=commit), 3).error_code)


# --- the cases: each takes (client, bootstrap, topic) on a fresh one-partition topic ------


def unknown_topic(c: RawClient, bootstrap: str, topic: str) -> Any:
    missing = f"{topic}-missing"
    return {"produce": produce(c, missing, build_batch([(b"k", b"v")]))[0],
            "fetch": fetch(c, missing)[0], "list_offsets": list_offsets(c, missing)}


def offset_out_of_range(c: RawClient, bootstrap: str, topic: str) -> Any:
    produce(c, topic, build_batch([(b"k", b"v")]))
    return {"past_end": fetch(c, topic, 100), "negative": fetch(c, topic, -5),
            "at_end": fetch(c, topic, 1)}


def invalid_partitions(c: RawClient, bootstrap: str, topic: str) -> Any:
    return {"same": create_partitions(c, topic, 1), "fewer": create_partitions(c, topic, 0),
            "unknown": create_partitions(c, f"{topic}-missing", 3),
            "more": create_partitions(c, topic, 2)}


def topic_already_exists(c: RawClient, bootstrap: str, topic: str) -> Any:
    return create_topics(c, topic)


def invalid_topic_configs(c: RawClient, bootstrap: str, topic: str) -> Any:
    return {
        "create_unknown_name": create_topics(c, f"{topic}-a", configs={"no.such.config": "1"}),
        "create_bad_value": create_topics(c, f"{topic}-b", configs={"retention.ms": "soon"}),
        "create_bad_enum": create_topics(c, f"{topic}-c", configs={"cleanup.policy": "shred"}),
        "alter_unknown_name": alter_configs(c, topic, {"no.such.config": "1"}),
        "alter_bad_value": alter_configs(c, topic, {"retention.ms": "soon"}),
        "alter_unknown_topic": alter_configs(c, f"{topic}-missing", {"retention.ms": "1000"}),
    }


def invalid_replication_factor(c: RawClient, bootstrap: str, topic: str) -> Any:
    return {"three": create_topics(c, f"{topic}-rf3", replication=3),
            "zero": create_topics(c, f"{topic}-rf0", replication=0),
            "zero_partitions": create_topics(c, f"{topic}-p0", partitions=0)}


def unsupported_version(c: RawClient, bootstrap: str, topic: str) -> Any:
    c.send_raw(frame(18, 99, b"\x00" * 8))
    raw = c.read_frame()
    assert raw is not None
    correlation_id, error_code = struct.unpack_from(">ih", raw, 0)
    with RawClient(bootstrap) as other:
        other.send_raw(frame(0, 99, b"\x00" * 8))
        produce_closed = other.is_closed_by_peer()
    return {"api_versions": (correlation_id, error_code), "produce_v99_closed": produce_closed,
            "healthy": healthy(bootstrap)}


def legacy_message_set() -> bytes:
    """One magic-1 message (what Produce v2 carries), in a message set at offset 0."""
    body = struct.pack(">bbqi", 1, 0, int(time.time() * 1000), 1) + b"k" + struct.pack(
        ">i", 1) + b"v"
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def legacy_produce(c: RawClient, bootstrap: str, topic: str) -> Any:
    """Produce v0-2 (Kafka 4 removed them, KIP-896) stay advertised, as Kafka 4 does for
    librdkafka's sake (KAFKA-18659), and a request at those versions closes its
    connection; at v3+ a magic-1 message set is an invalid record."""
    versions = c.request(ApiVersionsRequest(), 0)
    produce_min = next(k.min_version for k in versions.api_keys if k.api_key == 0)
    closed = {}
    for version in (0, 1, 2):
        for name, records in (("v2_batch", build_batch([(b"k", b"v")])),
                              ("message_set", legacy_message_set())):
            with RawClient(bootstrap) as old:
                P = ProduceRequest
                req = P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
                    P.TopicProduceData(name=topic, partition_data=[
                        P.TopicProduceData.PartitionProduceData(index=0, records=records)])])
                req.with_header(correlation_id=1, client_id="old")
                old.send_raw(bytes(req.encode(version=version, header=True, framed=True)))
                closed[f"v{version}_{name}"] = old.is_closed_by_peer()
    return {"produce_min_version": produce_min, "closed": closed,
            "v3_message_set": produce(c, topic, legacy_message_set(), version=3),
            "high_watermark": fetch(c, topic), "healthy": healthy(bootstrap)}


def end_txn_without_partitions(c: RawClient, bootstrap: str, topic: str) -> Any:
    txn = f"{topic}-txn"
    pid, epoch = init_producer_id(c, txn)
    return {"commit": end_txn(c, txn, pid, epoch, True),
            "abort": end_txn(c, txn, pid, epoch, False),
            "wrong_pid": end_txn(c, txn, pid + 1000, epoch, True)}


def txn_produce_verification(c: RawClient, bootstrap: str, topic: str) -> Any:
    """Transactional batches are checked against the coordinator before they are appended
    (Kafka's transaction.partition.verification.enable, on by default)."""
    txn = f"{topic}-txn"
    pid, epoch = init_producer_id(c, txn)

    def batch(p: int = pid, e: int = epoch, seq: int = 0) -> bytes:
        return build_batch([(b"k", b"v")], producer_id=p, producer_epoch=e,
                           base_sequence=seq, attributes=0x10)  # transactional
    def refused(records: bytes, transactional_id: str | None) -> tuple[int, int]:
        """A produce the verification refuses; Kafka's verification answers the retriable
        NOT_LEADER_OR_FOLLOWER (6) while its transaction coordinator warms up, so retry
        that as a client would (a refused batch appends nothing, so retrying is safe)."""
        found: tuple[int, int] = poll_until(
            "a settled verification answer",
            lambda: (r := produce(c, topic, records, transactional_id=transactional_id))[0]
            != NOT_LEADER_OR_FOLLOWER and r, interval=0.1)
        return found

    seen = {"not_added": refused(batch(), txn),
            "other_txn_id": refused(batch(), f"{txn}-other"),
            "no_txn_id": refused(batch(), None),
            "add": add_partitions(c, txn, pid, epoch, topic),
            "wrong_pid": refused(batch(p=pid + 77), txn),
            "future_epoch": produce(c, topic, batch(e=epoch + 1), transactional_id=txn),
            "ok": produce(c, topic, batch(), transactional_id=txn),
            "commit": end_txn(c, txn, pid, epoch, True)}
    # A second InitProducerId fences the first incarnation.
    pid2, epoch2 = init_producer_id(c, txn)
    assert (pid2, epoch2) == (pid, epoch + 1)
    seen |= {"add_fenced": add_partitions(c, txn, pid, epoch, topic),
             "add_new": add_partitions(c, txn, pid, epoch2, topic),
             "produce_fenced": produce(c, topic, batch(seq=1), transactional_id=txn),
             "end_txn_fenced": end_txn(c, txn, pid, epoch, True),
             "end_txn_new": end_txn(c, txn, pid, epoch2, False)}
    return seen


def deleted_topic(c: RawClient, bootstrap: str, topic: str) -> Any:
    produce(c, topic, build_batch([(b"k", b"v")]))
    r = c.request(DeleteTopicsRequest(timeout_ms=10000, topic_names=[topic]), 5)
    assert r.responses[0].error_code == 0

    last: dict[str, Any] = {}

    def gone() -> Any:
        last.update(fetch=fetch(c, topic)[0], list_offsets=list_offsets(c, topic),
                    produce=produce(c, topic, build_batch([(b"k", b"v")]))[0])
        # Apache Kafka forgets a deleted topic one request handler at a time (KRaft's
        # metadata is applied asynchronously, and a busy machine shows transient codes
        # such as NOT_LEADER_OR_FOLLOWER meanwhile): wait until the answers settle on
        # UNKNOWN_TOPIC_OR_PARTITION, and compare whatever was seen last otherwise.
        return dict(last) if set(last.values()) == {3} else None
    try:
        return poll_until("topic deleted", gone, timeout=20)
    except Stalled:
        return dict(last)


def record_too_large(c: RawClient, bootstrap: str, topic: str) -> Any:
    assert alter_configs(c, topic, {"max.message.bytes": "1000"}) == 0
    # Apache Kafka acknowledges AlterConfigs once its controller has the change and applies
    # it to the partition a moment later: until then the large batch is appended. Produce
    # it until it is refused, and count the appends, so the offsets compare either way.
    appended = 0

    def refused() -> tuple[int, int] | None:
        nonlocal appended
        answer = produce(c, topic, build_batch([(b"k", b"x" * 2000)]))
        if answer[0] == 0:
            appended += 1
            return None
        return answer

    too_large = poll_until("max.message.bytes applied", refused, timeout=20)
    error, offset = produce(c, topic, build_batch([(b"k", b"x" * 100)]))
    return {"too_large": too_large, "fits": (error, offset - appended)}


def corrupt_crc(c: RawClient, bootstrap: str, topic: str) -> Any:
    batch = bytearray(build_batch([(b"k", b"v"), (b"k2", b"v2")]))
    batch[-1] ^= 0xFF
    return {"corrupt": produce(c, topic, bytes(batch)), "high_watermark": fetch(c, topic)}


def malformed_frame(c: RawClient, bootstrap: str, topic: str) -> Any:
    with RawClient(bootstrap) as bad:
        bad.send_raw(struct.pack(">i", 12) + b"\xff" * 12)
        garbage_closed = bad.is_closed_by_peer()
    with RawClient(bootstrap) as bad:
        # A valid header, then a Metadata body cut short.
        bad.send_raw(frame(3, 12, b"\x02\x00"))
        truncated_closed = bad.is_closed_by_peer()
    return {"garbage_closed": garbage_closed, "truncated_closed": truncated_closed,
            "bystander": len(c.request(MetadataRequest(topics=None), 12).brokers),
            "healthy": healthy(bootstrap)}


def authorized_operations(c: RawClient, bootstrap: str, topic: str) -> Any:
    m = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                  allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=True,
                                  include_topic_authorized_operations=True), 9)
    plain = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                      allow_auto_topic_creation=False), 12)
    cluster = c.request(DescribeClusterRequest(include_cluster_authorized_operations=True), 1)
    group = f"{topic}-g"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    groups = c.request(DescribeGroupsRequest(groups=[group, f"{topic}-unknown"],
                                             include_authorized_operations=True), 5)
    return {"metadata": (m.authorized_operations, m.topics[0].authorized_operations),
            "not_requested": plain.topics[0].authorized_operations,
            "describe_cluster": cluster.authorized_operations,
            "describe_groups": [(g.error_code, g.group_state, g.authorized_operations)
                                for g in groups.groups]}


CASES: dict[str, tuple[Callable[[RawClient, str, str], Any], Any]] = {
    # case: (scenario, what Apache Kafka 4.3 answers)
    "unknown_topic": (unknown_topic, {"produce": 3, "fetch": 3, "list_offsets": 3}),
    "offset_out_of_range": (offset_out_of_range, {
        "past_end": (1, -1), "negative": (1, -1), "at_end": (0, 1)}),
    "invalid_partitions": (invalid_partitions, {"same": 37, "fewer": 37, "unknown": 3,
                                                "more": 0}),
    "topic_already_exists": (topic_already_exists, 36),
    "invalid_topic_configs": (invalid_topic_configs, {
        "create_unknown_name": 40, "create_bad_value": 40, "create_bad_enum": 40,
        "alter_unknown_name": 40, "alter_bad_value": 40, "alter_unknown_topic": 3}),
    "invalid_replication_factor": (invalid_replication_factor, {
        "three": 38, "zero": 38, "zero_partitions": 37}),
    "unsupported_version": (unsupported_version, {
        "api_versions": (7, 35), "produce_v99_closed": True, "healthy": True}),
    "legacy_produce": (legacy_produce, {
        "produce_min_version": 0, "closed": {f"v{v}_{n}": True for v in (0, 1, 2)
                                             for n in ("v2_batch", "message_set")},
        "v3_message_set": (87, -1), "high_watermark": (0, 0), "healthy": True}),
    "end_txn_without_partitions": (end_txn_without_partitions, {
        "commit": 48, "abort": 48, "wrong_pid": 49}),
    "txn_produce_verification": (txn_produce_verification, {
        "not_added": (48, -1), "other_txn_id": (49, -1), "no_txn_id": (53, -1), "add": 0,
        "wrong_pid": (49, -1), "future_epoch": (47, -1), "ok": (0, 0), "commit": 0,
        "add_fenced": 90, "add_new": 0, "produce_fenced": (47, -1), "end_txn_fenced": 90,
        "end_txn_new": 0}),
    "deleted_topic": (deleted_topic, {"fetch": 3, "list_offsets": 3, "produce": 3}),
    "record_too_large": (record_too_large, {"too_large": (10, -1), "fits": (0, 0)}),
    "corrupt_crc": (corrupt_crc, {"corrupt": (2, -1), "high_watermark": (0, 0)}),
    "malformed_frame": (malformed_frame, {"garbage_closed": True, "truncated_closed": True,
                                          "bystander": 1, "healthy": True}),
    # No authorizer: everything the resource type supports (AclOperation bit numbers).
    "authorized_operations": (authorized_operations, {
        "metadata": ({5, 7, 8, 9, 10, 11, 12}, {3, 4, 5, 6, 7, 8, 10, 11}),
        "not_requested": None, "describe_cluster": {5, 7, 8, 9, 10, 11, 12},
        "describe_groups": [(0, "Empty", {3, 6, 8, 10, 11}), (0, "Dead", {3, 6, 8, 10, 11})]}),
}


def observe(bootstrap: str, topic: str, case: str) -> Any:
    create_topic(bootstrap, topic)
    with RawClient(bootstrap) as c:
        return CASES[case][0](c, bootstrap, topic)


@pytest.mark.parametrize("case", list(CASES))
def test_error_codes_match(brokers: Brokers, topic_name: str, case: str) -> None:
    reference = observe(brokers.kafka, topic_name, case)
    ours = observe(brokers.headrace, topic_name, case)
    assert ours == reference
    assert reference == CASES[case][1]


def record_errors_of(bootstrap: str, topic: str, configs: dict[str, str], records: bytes,
                     version: int) -> tuple[Any, ...]:
    """Produce ``records`` once; the partition's code, error message, log start offset,
    record errors (timestamp ranges, which depend on each broker's clock, blanked) and
    the high watermark afterwards."""
    create_topic(bootstrap, topic, configs=configs)
    P = ProduceRequest
    req = P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[
            P.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    with RawClient(bootstrap) as c:
        part = c.request(req, version).responses[0].partition_responses[0]
        errors = [(e.batch_index, e.batch_index_error_message.split(" within ")[0])
                  for e in getattr(part, "record_errors", None) or []]
        return (part.error_code, getattr(part, "error_message", None), part.base_offset,
                part.log_start_offset, errors, fetch(c, topic)[1])


NULL_KEYS = [i * 10 + 3 for i in range(10)]


@pytest.mark.parametrize("version", [8, 9, 11])
def test_null_keys_in_compacted_topic_are_named_per_record(
        brokers: Brokers, topic_name: str, version: int) -> None:
    """librdkafka's 0011_produce_batch: 100 records, 10 without a key, to a compacted
    topic: INVALID_RECORD naming exactly those 10, and nothing of the batch appended."""
    records = build_batch([(None if i in NULL_KEYS else b"k%d" % i, b"v") for i in range(100)])
    reference = record_errors_of(brokers.kafka, topic_name, {"cleanup.policy": "compact"},
                                 records, version)
    ours = record_errors_of(brokers.headrace, topic_name, {"cleanup.policy": "compact"},
                            records, version)
    assert ours == reference
    message = f"Compacted topic cannot accept message without key in topic partition {topic_name}-0"
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{message}')" for i in NULL_KEYS[:3])
    assert reference == (
        87, "One or more records have been rejected due to 10 record errors in total, and only "
        f"showing the first three errors at most: [{shown}]", -1, 0,
        [(i, message) for i in NULL_KEYS], 0)


def test_before_v8_a_null_key_fails_the_partition_alone(brokers: Brokers, topic_name: str) -> None:
    records = build_batch([(None, b"v"), (b"k", b"v")])
    reference = record_errors_of(brokers.kafka, topic_name, {"cleanup.policy": "compact"},
                                 records, 7)
    ours = record_errors_of(brokers.headrace, topic_name, {"cleanup.policy": "compact"},
                            records, 7)
    assert ours == reference == (87, None, -1, 0, [], 0)


def test_timestamps_out_of_range_are_named_per_record(brokers: Brokers, topic_name: str) -> None:
    """message.timestamp.before/after.max.ms refuse records one by one (INVALID_TIMESTAMP,
    which wins over a null key in the same batch, whose record keeps its own message)."""
    now = int(time.time() * 1000)
    hour = 3600 * 1000
    stamps = [now, now - hour, now + hour, now, 0, -1]  # -1: no timestamp, never checked
    configs = {"cleanup.policy": "compact", "message.timestamp.before.max.ms": "600000",
               "message.timestamp.after.max.ms": "600000"}

    def batch() -> bytes:
        # Records with their own timestamps: one batch per record, then spliced into one.
        return build_timestamped_batch(
            [(None if i == 3 else b"k", b"v", ts) for i, ts in enumerate(stamps)])

    reference = record_errors_of(brokers.kafka, topic_name, configs, batch(), 9)
    ours = record_errors_of(brokers.headrace, topic_name, configs, batch(), 9)
    assert ours == reference
    key_message = ("Compacted topic cannot accept message without key in topic partition "
                   f"{topic_name}-0")
    assert reference == (32, "One or more records have been rejected due to invalid timestamp",
                         -1, 0, [
                             (1, f"Timestamp {now - hour} of message with offset 1 is out of "
                                 "range. The timestamp should be"),
                             (2, f"Timestamp {now + hour} of message with offset 2 is out of "
                                 "range. The timestamp should be"),
                             (3, key_message),
                             (4, "Timestamp 0 of message with offset 4 is out of range. The "
                                 "timestamp should be")], 0)


def test_default_after_max_ms_is_one_hour(brokers: Brokers, topic_name: str) -> None:
    now = int(time.time() * 1000)
    records = build_timestamped_batch([(b"k", b"v", 0), (b"k", b"v", now + 2 * 3600 * 1000)])
    reference = record_errors_of(brokers.kafka, topic_name, {}, records, 9)
    ours = record_errors_of(brokers.headrace, topic_name, {}, records, 9)
    assert ours == reference
    assert reference[0] == 32 and [i for i, _ in reference[4]] == [1]


def test_understated_max_timestamp_is_trusted(brokers: Brokers, topic_name: str) -> None:
    """Deliberate difference (COMPATIBILITY.md): with before.max.ms unlimited, headrace
    checks a non-compacted batch's declared max timestamp, not each record."""
    now = int(time.time() * 1000)
    records = build_timestamped_batch([(b"k", b"v", now), (b"k", b"v", now + 2 * 3600 * 1000)],
                                      max_timestamp=now)
    assert record_errors_of(brokers.kafka, topic_name, {}, records, 9)[0] == 32
    assert record_errors_of(brokers.headrace, topic_name, {}, records, 9)[0] == 0


def build_timestamped_batch(records: list[tuple[bytes | None, bytes, int]],
                            max_timestamp: int | None = None) -> bytes:
    """An uncompressed v2 batch whose records carry their own CreateTime timestamps
    (the first is the base timestamp; the batch declares ``max_timestamp``, by default
    the real one)."""
    base = records[0][2]
    top = max(ts for _, _, ts in records) if max_timestamp is None else max_timestamp
    body = b"".join(encode_record(i, ts - base, k, v) for i, (k, v, ts) in enumerate(records))
    tail = struct.pack(">hiqqqhii", 0, len(records) - 1, base, top, -1, -1, -1,
                       len(records)) + body
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(tail), 0, 2, crc32c.crc32c(tail)) + tail
