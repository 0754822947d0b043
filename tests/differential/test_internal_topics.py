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

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from headrace.testing import scaled
from tests.differential.secured import USERS, Secured, login
from tests.integration.attacks import (
    add_to_transaction,
    alter_configs,
    create_partitions,
    create_topic,
    delete_records,
    describe_configs,
    fetch,
    list_offsets,
    metadata,
    produce,
)
from tests.integration.rawclient import RawClient
from tests.integration.txn_support import wait_for

INTERNAL = ("__consumer_offsets", "__transaction_state")
TOPICS = (*INTERNAL, "__cluster_metadata")
Attempt = Callable[[RawClient, str], Any]


ATTEMPTS: dict[str, Attempt] = {
    "produce": produce, "fetch": fetch, "list offsets": list_offsets,
    "delete records": delete_records, "describe configs": describe_configs,
    "alter configs (validate only)": alter_configs,
    "create topic (validate only)": partial(create_topic, validate_only=True),
    "metadata": metadata,
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
    answers = each(pair, "mallory",
                   lambda c: create_partitions(c, topic, validate_only=True))
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
