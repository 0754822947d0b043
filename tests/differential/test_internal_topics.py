"""The attack suite of ``tests/integration/test_private_state.py`` against Apache Kafka 4.3.1:
mallory holds ALL (and READ, WRITE) on topic ``*``, ALL on the ``__`` prefix, on every group
and transactional id, on both brokers of the session's secured pair (``secured``). On the
topics both brokers have (``__consumer_offsets``, ``__transaction_state``) and on Kafka's
own metadata log name ``__cluster_metadata`` (a log no request reaches on either) she and
the super user try to forge, read, truncate, reconfigure (validate only), create, list and
add to a transaction; every answer must be Kafka's.

Where headrace is deliberately stricter (it never lets a client delete or grow an internal
topic; Kafka lets a principal with DELETE or ALTER do both) the difference is asserted as
such, with CreatePartitions in validate-only mode, and DeleteTopics is never sent to Kafka
(it would delete the session Kafka's ``__consumer_offsets``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import AddPartitionsToTxnRequest, ProduceRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from headrace.protocol.records import build_batch
from headrace.testing import scaled
from tests.differential.secured import USERS, Secured, login
from tests.integration.rawclient import RawClient
from tests.integration.txn_support import wait_for

INTERNAL = ("__consumer_offsets", "__transaction_state")
TOPICS = (*INTERNAL, "__cluster_metadata")
Attempt = Callable[[RawClient, str], Any]


def produce(c: RawClient, topic: str) -> int:
    P = ProduceRequest
    batch = build_batch([(b"\x00\x01forged-key", b"\x00\x03forged-value")],
                        timestamp_ms=int(time.time() * 1000))
    r = c.request(P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[
            P.TopicProduceData.PartitionProduceData(index=0, records=batch)])]), 9)
    return int(r.responses[0].partition_responses[0].error_code)


def fetch(c: RawClient, topic: str) -> int:
    ft = FetchRequest.FetchTopic
    r = c.request(FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 16, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[ft(topic=topic, partitions=[
            ft.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                              last_fetched_epoch=-1, log_start_offset=-1,
                              partition_max_bytes=1 << 16)])],
        forgotten_topics_data=[], rack_id=""), 12)
    return int(r.responses[0].partitions[0].error_code)


def list_offsets(c: RawClient, topic: str) -> int:
    lt = ListOffsetsRequest.ListOffsetsTopic
    r = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[lt(
        name=topic, partitions=[lt.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 7)
    return int(r.topics[0].partitions[0].error_code)


def delete_records(c: RawClient, topic: str) -> int:
    dr = DeleteRecordsRequest.DeleteRecordsTopic
    r = c.request(DeleteRecordsRequest(topics=[dr(name=topic, partitions=[
        dr.DeleteRecordsPartition(partition_index=0, offset=-1)])], timeout_ms=5000), 2)
    return int(r.topics[0].partitions[0].error_code)


def describe_configs(c: RawClient, topic: str) -> int:
    res = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=["retention.ms"])
    r = c.request(DescribeConfigsRequest(resources=[res], include_synonyms=False,
                                         include_documentation=False), 4)
    return int(r.results[0].error_code)


def alter_configs(c: RawClient, topic: str) -> int:
    ar = IncrementalAlterConfigsRequest.AlterConfigsResource
    r = c.request(IncrementalAlterConfigsRequest(resources=[ar(
        resource_type=2, resource_name=topic, configs=[ar.AlterableConfig(
            name="retention.ms", config_operation=0, value="1")])], validate_only=True), 1)
    return int(r.responses[0].error_code)


def create_topic(c: RawClient, topic: str) -> int:
    t = CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=1,
                                           assignments=[], configs=[])
    return int(c.request(CreateTopicsRequest(topics=[t], timeout_ms=5000, validate_only=True),
                         7).topics[0].error_code)


def metadata(c: RawClient, topic: str) -> tuple[int, bool]:
    r = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                  allow_auto_topic_creation=True), 12)
    return int(r.topics[0].error_code), bool(r.topics[0].is_internal)


def add_to_transaction(c: RawClient, topic: str) -> int:
    t = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    r = c.request(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=f"mallory-{uuid.uuid4().hex[:6]}",
        v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
        v3_and_below_topics=[t(name=topic, partitions=[0])]), 3)
    return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def create_partitions(c: RawClient, topic: str) -> int:
    cp = CreatePartitionsRequest.CreatePartitionsTopic
    r = c.request(CreatePartitionsRequest(topics=[cp(name=topic, count=8, assignments=None)],
                                          timeout_ms=5000, validate_only=True), 1)
    return int(r.results[0].error_code)


ATTEMPTS: dict[str, Attempt] = {
    "produce": produce, "fetch": fetch, "list offsets": list_offsets,
    "delete records": delete_records, "describe configs": describe_configs,
    "alter configs (validate only)": alter_configs,
    "create topic (validate only)": create_topic, "metadata": metadata,
}


def internal_topics_exist(s: Secured) -> None:
    """Both brokers create them on first use of a group or transaction coordinator."""
    with RawClient(s.operator) as c:
        for key_type in (0, 1):
            c.request(FindCoordinatorRequest(key_type=key_type, coordinator_keys=["probe"]), 4)

    def ready() -> bool:
        with RawClient(s.operator) as c:
            r = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t)
                                                  for t in INTERNAL],
                                          allow_auto_topic_creation=False), 12)
        return all(t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0
                   for t in r.topics)
    wait_for("the internal topics with a leader", ready, scaled(60))


@pytest.fixture(scope="module")
def pair(kafka_secured: Secured, headrace_secured: Secured) -> dict[str, Secured]:
    for s in (kafka_secured, headrace_secured):
        internal_topics_exist(s)
    return {"kafka": kafka_secured, "headrace": headrace_secured}


def each(pair: dict[str, Secured], user: str | None,
         run: Callable[[RawClient], Any]) -> dict[str, Any]:
    """``run``'s answer on each broker, as ``user`` (None: the PLAINTEXT super user)."""
    out = {}
    for name, s in pair.items():
        with (RawClient(s.operator) if user is None else login(s.users, user)) as c:
            out[name] = run(c)
    return out


@pytest.mark.parametrize("topic", TOPICS)
def test_an_attacker_gets_kafkas_answers(pair: dict[str, Secured], topic: str) -> None:
    def run(c: RawClient) -> dict[str, Any]:
        got = {what: attempt(c, topic) for what, attempt in ATTEMPTS.items()}
        if topic in INTERNAL:
            got["add to transaction"] = add_to_transaction(c, topic)
        return got

    answers = each(pair, "mallory", run)
    assert answers["headrace"] == answers["kafka"], answers
    if topic in INTERNAL:  # readable by her grants, never writable (Kafka's rules)
        assert answers["kafka"]["fetch"] == 0
        assert answers["kafka"]["produce"] == answers["kafka"]["delete records"] == 17
        assert answers["kafka"]["add to transaction"] == 29
    else:  # Kafka's metadata log: no request reaches it on either broker
        assert answers["kafka"]["create topic (validate only)"] == 42
        assert answers["kafka"]["fetch"] == 3


@pytest.mark.parametrize("topic", INTERNAL)
def test_not_even_a_super_user_writes_an_internal_topic(pair: dict[str, Secured],
                                                        topic: str) -> None:
    answers = each(pair, None, lambda c: (produce(c, topic), delete_records(c, topic)))
    assert answers["headrace"] == answers["kafka"] == (17, 17), answers


def test_listing_marks_the_same_topics_internal(pair: dict[str, Secured]) -> None:
    def run(c: RawClient) -> Any:
        r = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
        return sorted((t.name, t.is_internal) for t in r.topics if t.name.startswith("__"))

    answers = each(pair, "mallory", run)
    assert answers["headrace"] == answers["kafka"] == [(t, True) for t in INTERNAL], answers


@pytest.mark.parametrize("topic", INTERNAL)
def test_growing_an_internal_topic_is_where_headrace_is_stricter(
        pair: dict[str, Secured], topic: str) -> None:
    answers = each(pair, "mallory", lambda c: create_partitions(c, topic))
    assert answers == {"kafka": 0, "headrace": 17}


def test_plain_refuses_a_foreign_authorization_id_alike(pair: dict[str, Secured]) -> None:
    def run(address: str) -> tuple[int, str]:
        with RawClient(address) as c:
            assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
            r = c.request(SaslAuthenticateRequest(
                auth_bytes=f"alice\0mallory\0{USERS['mallory']}".encode()), 2)
            return int(r.error_code), str(r.error_message)

    answers = {name: run(s.users) for name, s in pair.items()}
    assert answers["headrace"] == answers["kafka"], answers
    assert answers["kafka"][0] == 58
