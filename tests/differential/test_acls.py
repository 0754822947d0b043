"""ACL decisions and error codes against Apache Kafka's StandardAuthorizer: the same ACLs
on both brokers (created through the Admin API by the operator on PLAINTEXT, a super
user), then the same requests from SASL PLAIN users on each; what each answers is
compared, request by request. The brokers are the session's secured pair
(``secured``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kafka.protocol.admin import (
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    ListGroupsRequest,
)
from kafka.protocol.admin.acl import CreateAclsRequest, DescribeAclsRequest
from kafka.protocol.admin.users import DescribeUserScramCredentialsRequest
from kafka.protocol.consumer import ListOffsetsRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest

from headrace.testing import scaled
from tests.differential.secured import GROUP, PAY, SECRET, SUFFIX, USERS, Secured, login
from tests.integration import attacks
from tests.integration.rawclient import RawClient

MT = MetadataRequest.MetadataRequestTopic
Scenario = Callable[[RawClient], Any]
TRANSIENT = (14, 15)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE


def _fetch(topic: str) -> Scenario:
    return lambda c: attacks.fetch(c, topic)


def _metadata(*names: str, create: bool = False) -> Scenario:
    def run(c: RawClient) -> Any:
        r = c.request(MetadataRequest(topics=[MT(name=n) for n in names],
                                      allow_auto_topic_creation=create,
                                      include_topic_authorized_operations=True), 12)
        return sorted((t.name, t.error_code, sorted(t.authorized_operations or ()))
                      for t in r.topics)
    return run


def _all_topics(c: RawClient) -> Any:
    r = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
    return sorted(t.name for t in r.topics if t.name.endswith(SUFFIX))


def _find(key: str, key_type: int) -> Scenario:
    def run(c: RawClient) -> Any:
        r = c.request(FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), 4)
        return r.coordinators[0].error_code
    return run


def _init_pid(txn_id: str | None) -> Scenario:
    def run(c: RawClient) -> Any:
        return c.request(InitProducerIdRequest(
            transactional_id=txn_id, transaction_timeout_ms=60000, producer_id=-1,
            producer_epoch=-1), 4).error_code
    return run


def _describe_acls(c: RawClient) -> Any:
    return c.request(DescribeAclsRequest(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1), 3).error_code


def _create_acls(c: RawClient) -> Any:
    creation = CreateAclsRequest.AclCreation(
        resource_type=2, resource_name="x", resource_pattern_type=3, principal="User:x",
        host="*", operation=3, permission_type=3)
    return [r.error_code for r in c.request(CreateAclsRequest(creations=[creation]), 3).results]


def _create_topic(name: str) -> Scenario:
    def run(c: RawClient) -> Any:
        t = CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1,
                                               replication_factor=1, assignments=[], configs=[])
        r = c.request(CreateTopicsRequest(topics=[t], timeout_ms=30000, validate_only=True), 7)
        return r.topics[0].error_code
    return run


def _delete_topic(name: str) -> Scenario:
    def run(c: RawClient) -> Any:
        r = c.request(DeleteTopicsRequest(topic_names=[name], timeout_ms=30000), 5)
        return r.responses[0].error_code
    return run


def _describe_configs(rtype: int, name: str) -> Scenario:
    def run(c: RawClient) -> Any:
        res = DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=rtype, resource_name=name, configuration_keys=["retention.ms"])
        r = c.request(DescribeConfigsRequest(resources=[res], include_synonyms=False,
                                             include_documentation=False), 4)
        return r.results[0].error_code
    return run


def _list_offsets(topic: str) -> Scenario:
    def run(c: RawClient) -> Any:
        lt = ListOffsetsRequest.ListOffsetsTopic
        r = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[lt(
            name=topic, partitions=[lt.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 7)
        return r.topics[0].partitions[0].error_code
    return run


def _offset_fetch(group: str) -> Scenario:
    def run(c: RawClient) -> Any:
        g = OffsetFetchRequest.OffsetFetchRequestGroup
        r = c.request(OffsetFetchRequest(groups=[g(group_id=group, topics=None)],
                                         require_stable=False), 8)
        return r.groups[0].error_code
    return run


def _describe_group(group: str) -> Scenario:
    def run(c: RawClient) -> Any:
        r = c.request(DescribeGroupsRequest(groups=[group], include_authorized_operations=True),
                      5)
        return r.groups[0].error_code
    return run


def _list_groups(c: RawClient) -> Any:
    return c.request(ListGroupsRequest(states_filter=[]), 4).error_code


def _describe_cluster(c: RawClient) -> Any:
    r = c.request(DescribeClusterRequest(include_cluster_authorized_operations=True), 0)
    return r.error_code, sorted(r.authorized_operations or ())


def _log_dirs(c: RawClient) -> Any:
    return c.request(DescribeLogDirsRequest(topics=None), 4).error_code


def _scram_users(c: RawClient) -> Any:
    # users=[] (every user): Kafka 4.3 never answers a null list
    r = c.request(DescribeUserScramCredentialsRequest(users=[]), 0)
    return r.error_code, r.error_message, r.results


SCENARIOS: dict[str, tuple[str, Scenario]] = {
    "fetch allowed (READ)": ("bob", _fetch(PAY)),
    "fetch WRITE only": ("alice", _fetch(PAY)),
    "fetch nothing granted": ("bob", _fetch(SECRET)),
    "fetch DENY READ": ("dave", _fetch(PAY)),
    "list offsets READ": ("bob", _list_offsets(PAY)),
    "list offsets DESCRIBE via wildcard": ("dave", _list_offsets(SECRET)),
    "list offsets nothing": ("bob", _list_offsets(SECRET)),
    "metadata named": ("alice", _metadata(PAY, SECRET)),
    "metadata named, implied ops": ("bob", _metadata(PAY)),
    "metadata all topics (bob)": ("bob", _all_topics),
    "metadata all topics (dave)": ("dave", _all_topics),
    "find group allowed": ("bob", _find(GROUP, 0)),
    "find group refused": ("alice", _find(GROUP, 0)),
    "find txn allowed": ("alice", _find(f"alice-tx-{SUFFIX}", 1)),
    "find txn refused": ("bob", _find(f"alice-tx-{SUFFIX}", 1)),
    "init idempotent, WRITE on a prefix": ("alice", _init_pid(None)),
    "init idempotent, IDEMPOTENT_WRITE": ("dave", _init_pid(None)),
    "init idempotent, nothing": ("bob", _init_pid(None)),
    "init transactional allowed": ("alice", _init_pid(f"alice-tx-{SUFFIX}")),
    "init transactional refused": ("bob", _init_pid(f"alice-tx-{SUFFIX}")),
    "describe acls refused": ("alice", _describe_acls),
    "create acls refused": ("dave", _create_acls),
    "create topic allowed (validate only)": ("alice", _create_topic(f"pay-new-{SUFFIX}")),
    "create topic refused": ("alice", _create_topic(f"other-{SUFFIX}")),
    "delete topic refused": ("alice", _delete_topic(PAY)),
    "describe topic configs refused": ("alice", _describe_configs(2, PAY)),
    "describe broker configs refused": ("dave", _describe_configs(4, "1")),
    "offset fetch refused": ("alice", _offset_fetch(GROUP)),
    "offset fetch allowed (READ implies DESCRIBE)": ("bob", _offset_fetch(GROUP)),
    "describe group refused": ("alice", _describe_group(GROUP)),
    "list groups": ("alice", _list_groups),
    "describe cluster without DESCRIBE": ("alice", _describe_cluster),
    "describe cluster with DESCRIBE": ("dave", _describe_cluster),
    "log dirs refused": ("alice", _log_dirs),
    "log dirs allowed": ("dave", _log_dirs),
    "scram users refused": ("alice", _scram_users),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_same_answer_as_kafka(kafka_secured: Secured, headrace_secured: Secured,
                              scenario: str) -> None:
    user, run = SCENARIOS[scenario]
    answers = {}
    for name, s in (("kafka", kafka_secured), ("headrace", headrace_secured)):
        deadline = time.monotonic() + scaled(30)
        while True:  # Kafka loads its coordinators and producer ids on first use
            with login(s.users, user) as c:
                answers[name] = run(c)
            if answers[name] not in TRANSIENT or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert answers["headrace"] == answers["kafka"], answers


# ids without the topics' random suffix: every xdist worker must collect the same names
@pytest.mark.parametrize(("user", "topic"), [("alice", PAY), ("bob", PAY), ("alice", SECRET)],
                         ids=["alice-pay", "bob-pay", "alice-secret"])
def test_produce_same_as_kafka(kafka_secured: Secured, headrace_secured: Secured, user: str,
                               topic: str) -> None:
    codes = {}
    for name, s in (("kafka", kafka_secured), ("headrace", headrace_secured)):
        errors: list[Any] = []
        p = Producer({"bootstrap.servers": s.users, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "PLAIN", "sasl.username": user,
                      "sasl.password": USERS[user], "enable.idempotence": False,
                      "message.timeout.ms": int(scaled(10_000))})
        p.produce(topic, b"x", on_delivery=lambda e, _m, seen=errors: seen.append(e))
        p.flush(scaled(30))
        codes[name] = [0 if e is None else e.code() for e in errors]
    assert codes["headrace"] == codes["kafka"], codes
    assert codes["kafka"] in ([0], [KafkaError.TOPIC_AUTHORIZATION_FAILED])
