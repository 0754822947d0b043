"""Raw Kafka requests that each try one thing on one topic and return its error code: the
attempts of the attack suites (``test_private_state.py`` against headrace,
``tests/differential/test_internal_topics.py`` against Apache Kafka too). Partition 0
only; changes are real unless ``validate_only``."""

from __future__ import annotations

import time
import uuid

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import AddPartitionsToTxnRequest, ProduceRequest

from headrace.protocol.records import build_batch
from tests.integration.rawclient import RawClient


def produce(c: RawClient, topic: str, batch: bytes | None = None) -> int:
    """``batch`` (default: one forged keyed record) appended with acks=all."""
    if batch is None:
        batch = build_batch([(b"\x00\x01forged-key", b"\x00\x03forged-value")],
                            timestamp_ms=int(time.time() * 1000))
    P = ProduceRequest
    r = c.request(P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[
            P.TopicProduceData.PartitionProduceData(index=0, records=batch)])]), 9)
    return int(r.responses[0].partition_responses[0].error_code)


def fetch(c: RawClient, topic: str) -> int:
    ft = FetchRequest.FetchTopic
    r = c.request(FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[ft(topic=topic, partitions=[
            ft.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                              last_fetched_epoch=-1, log_start_offset=-1,
                              partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id=""), 12)
    return int(r.responses[0].partitions[0].error_code)


def list_offsets(c: RawClient, topic: str) -> int:
    lt = ListOffsetsRequest.ListOffsetsTopic
    r = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[lt(
        name=topic, partitions=[lt.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 7)
    return int(r.topics[0].partitions[0].error_code)


def leader_epoch(c: RawClient, topic: str) -> int:
    t = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    r = c.request(OffsetForLeaderEpochRequest(replica_id=-1, topics=[t(
        topic=topic, partitions=[t.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=-1, leader_epoch=0)])]), 4)
    return int(r.topics[0].partitions[0].error_code)


def delete_records(c: RawClient, topic: str) -> int:
    dr = DeleteRecordsRequest.DeleteRecordsTopic
    r = c.request(DeleteRecordsRequest(topics=[dr(name=topic, partitions=[
        dr.DeleteRecordsPartition(partition_index=0, offset=-1)])], timeout_ms=5000), 2)
    return int(r.topics[0].partitions[0].error_code)


def delete_topic(c: RawClient, topic: str) -> int:
    r = c.request(DeleteTopicsRequest(topic_names=[topic], timeout_ms=5000), 5)
    return int(r.responses[0].error_code)


def create_partitions(c: RawClient, topic: str, validate_only: bool = False) -> int:
    cp = CreatePartitionsRequest.CreatePartitionsTopic
    r = c.request(CreatePartitionsRequest(topics=[cp(name=topic, count=8, assignments=None)],
                                          timeout_ms=5000, validate_only=validate_only), 1)
    return int(r.results[0].error_code)


def alter_configs(c: RawClient, topic: str) -> int:
    """Validate only (the answer is the point, not the change)."""
    ar = IncrementalAlterConfigsRequest.AlterConfigsResource
    r = c.request(IncrementalAlterConfigsRequest(resources=[ar(
        resource_type=2, resource_name=topic, configs=[ar.AlterableConfig(
            name="retention.ms", config_operation=0, value="1")])], validate_only=True), 1)
    return int(r.responses[0].error_code)


def describe_configs(c: RawClient, topic: str) -> int:
    res = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=None)
    r = c.request(DescribeConfigsRequest(resources=[res], include_synonyms=False,
                                         include_documentation=False), 4)
    return int(r.results[0].error_code)


def create_topic(c: RawClient, topic: str, validate_only: bool = False) -> int:
    t = CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=1,
                                           assignments=[], configs=[])
    return int(c.request(CreateTopicsRequest(topics=[t], timeout_ms=5000,
                                             validate_only=validate_only),
                         7).topics[0].error_code)


def metadata(c: RawClient, topic: str) -> tuple[int, bool]:
    """Metadata of ``topic`` (auto-creation allowed): its error code and ``is_internal``."""
    r = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                  allow_auto_topic_creation=True), 12)
    return int(r.topics[0].error_code), bool(r.topics[0].is_internal)


def add_to_transaction(c: RawClient, topic: str) -> int:
    """AddPartitionsToTxn v3 of a made-up transactional id."""
    t = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    r = c.request(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=f"mallory-{uuid.uuid4().hex[:6]}",
        v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
        v3_and_below_topics=[t(name=topic, partitions=[0])]), 3)
    return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
