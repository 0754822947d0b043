"""``kafka-transactions`` (Apache Kafka's own tool) against both brokers: describe-producers
on a partition written by an idempotent and a transactional producer (one transaction
committed, one left open), ``list`` filtered by a transactional id pattern
(ListTransactions v2, KIP-1152), then a hanging transaction (a transactional batch no
coordinator knows, written with produce-side verification off) found by ``find-hanging``
and ended by ``abort``, after which the last stable offset moves past it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kafka.protocol.admin import (
    DescribeClusterRequest,
    IncrementalAlterConfigsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.producer import ProduceRequest

from headrace.protocol.records import TRANSACTIONAL_FLAG, build_batch
from headrace.testing import ApacheKafka, EmbeddedBroker, scaled
from tests.differential.conftest import HEADRACE_ARGS, Brokers
from tests.differential.support import create_topic, watermarks
from tests.integration.kafka_tools import kafka_tool, table
from tests.integration.rawclient import RawClient
from tests.integration.txn_support import transactional_producer

VERIFICATION = "transaction.partition.verification.enable"
GHOST_PRODUCER_ID = 4242
BROKER, SET, DELETE = 4, 0, 1  # resource type; IncrementalAlterConfigs operations


def transactions(bootstrap: str, *args: str) -> list[dict[str, str]]:
    done = kafka_tool("kafka-transactions", "--bootstrap-server", bootstrap, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return table(done.stdout)


def without_time(rows: list[dict[str, str]], ids: dict[str, str]) -> list[dict[str, str]]:
    """Rows with producer ids renamed by ``ids`` and timestamps checked, then dropped."""
    now = time.time() * 1000
    out = []
    for row in rows:
        assert 0 < int(row.pop("LastTimestamp")) <= now + 1000, row
        row.pop("Duration(min)", None)
        row["ProducerId"] = ids.get(row["ProducerId"], row["ProducerId"])
        out.append(row)
    return sorted(out, key=lambda r: r["ProducerId"])


def describe_producers(bootstrap: str, topic: str) -> dict[str, object]:
    create_topic(bootstrap, topic)
    idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                           "linger.ms": 1})
    for v in (b"i1", b"i2", b"i3"):
        idempotent.produce(topic, v, partition=0)
    assert idempotent.flush(scaled(20)) == 0
    txn = transactional_producer(bootstrap, f"{topic}-txn")
    txn.begin_transaction()
    for v in (b"c1", b"c2"):
        txn.produce(topic, v, partition=0)
    txn.commit_transaction(scaled(20))
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0)
    assert txn.flush(scaled(20)) == 0
    try:
        rows = transactions(bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
        ids = {r["ProducerId"]: ("transactional" if r["CurrentTransactionStartOffset"] != "None"
                                 else "idempotent") for r in rows}
        # Open, but its coordinator will end it: not hanging.
        hanging = transactions(bootstrap, "find-hanging", "--topic", topic,
                               "--max-transaction-timeout", "0")
        return {"producers": without_time(rows, ids), "hanging": hanging}
    finally:
        txn.abort_transaction(scaled(20))


def test_describe_producers_matches(brokers: Brokers, topic_name: str) -> None:
    reference = describe_producers(brokers.kafka, topic_name)
    ours = describe_producers(brokers.headrace, topic_name)
    assert ours == reference
    assert reference == {"hanging": [], "producers": [
        {"ProducerId": "idempotent", "ProducerEpoch": "0", "LatestCoordinatorEpoch": "-1",
         "LastSequence": "2", "CurrentTransactionStartOffset": "None"},
        {"ProducerId": "transactional", "ProducerEpoch": "0", "LatestCoordinatorEpoch": "0",
         "LastSequence": "2", "CurrentTransactionStartOffset": "6"}]}


def list_by_pattern(bootstrap: str, topic: str) -> dict[str, object]:
    """Three open transactions, listed by patterns: the tool's ``--transactional-id-pattern``
    and raw ListTransactions v2 (whole-id matches, a pattern that does not compile)."""
    create_topic(bootstrap, topic)
    producers = []
    for suffix in ("alpha-1", "alphabet", "beta-2"):
        p = transactional_producer(bootstrap, f"{topic}-{suffix}")
        p.begin_transaction()
        p.produce(topic, suffix.encode(), partition=0)
        assert p.flush(scaled(20)) == 0
        producers.append(p)
    try:
        tool = transactions(bootstrap, "list", "--transactional-id-pattern", f"{topic}-alpha.*")
        seen: dict[str, object] = {"tool": sorted(
            (r["TransactionalId"].removeprefix(topic), r["TransactionState"]) for r in tool)}
        with RawClient(bootstrap) as c:
            for pattern in (f"{topic}-alpha", f"(?i){topic}-BETA-\\d", f"{topic}-a.*", "",
                            None, "["):
                r = c.request(ListTransactionsRequest(
                    state_filters=[], producer_id_filters=[], duration_filter=-1,
                    transactional_id_pattern=pattern), 2)
                seen[f"v2 {pattern!r}".replace(topic, "T")] = (r.error_code, sorted(
                    t.transactional_id.removeprefix(topic) for t in r.transaction_states
                    if t.transactional_id.startswith(topic)))
        return seen
    finally:
        for p in producers:
            p.abort_transaction(scaled(20))


def test_list_by_transactional_id_pattern(brokers: Brokers, topic_name: str) -> None:
    reference = list_by_pattern(brokers.kafka, topic_name)
    ours = list_by_pattern(brokers.headrace, topic_name)
    assert ours == reference
    every = ["-alpha-1", "-alphabet", "-beta-2"]
    assert reference == {
        "tool": [("-alpha-1", "Ongoing"), ("-alphabet", "Ongoing")],
        "v2 'T-alpha'": (0, []), "v2 '(?i)T-BETA-\\\\d'": (0, ["-beta-2"]),
        "v2 'T-a.*'": (0, ["-alpha-1", "-alphabet"]), "v2 ''": (0, every),
        "v2 None": (0, every), "v2 '['": (128, [])}  # INVALID_REGULAR_EXPRESSION


@pytest.fixture(scope="module")
def headrace_unverified() -> Iterator[EmbeddedBroker]:
    """headrace without produce-side transaction verification (set at start-up)."""
    with EmbeddedBroker(extra_args=[*HEADRACE_ARGS, "-c", f"{VERIFICATION}=false"]) as b:
        yield b


@pytest.fixture
def kafka_unverified(apache_kafka: ApacheKafka) -> Iterator[str]:
    """The session's Apache Kafka with verification off (a dynamic cluster-wide default)
    for one test, then back on."""
    def alter(value: str | None) -> None:
        R = IncrementalAlterConfigsRequest.AlterConfigsResource
        with RawClient(apache_kafka.bootstrap_servers) as c:
            r = c.request(IncrementalAlterConfigsRequest(validate_only=False, resources=[R(
                resource_type=BROKER, resource_name="", configs=[R.AlterableConfig(
                    name=VERIFICATION, config_operation=SET if value else DELETE,
                    value=value)])]), 0)
        assert r.responses[0].error_code == 0, r

    alter("false")
    try:
        yield apache_kafka.bootstrap_servers
    finally:
        alter(None)


def produce(c: RawClient, topic: str, records: bytes, transactional_id: str | None) -> int:
    P = ProduceRequest
    r = c.request(P(transactional_id=transactional_id, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[
            P.TopicProduceData.PartitionProduceData(index=0, records=records)])]), 9)
    part = r.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return int(part.base_offset)


def hanging_transaction(bootstrap: str, topic: str) -> dict[str, object]:
    create_topic(bootstrap, topic)
    now = int(time.time() * 1000)
    with RawClient(bootstrap) as c:
        node_id = c.request(DescribeClusterRequest(), 0).brokers[0].broker_id
        offsets = [
            produce(c, topic, build_batch([(b"k", b"a"), (b"k", b"b")], timestamp_ms=now), None),
            # A transaction of a producer id no coordinator gave out: nothing will end it.
            produce(c, topic, build_batch(
                [(b"k", b"hanging")], timestamp_ms=now, attributes=TRANSACTIONAL_FLAG,
                producer_id=GHOST_PRODUCER_ID, producer_epoch=0, base_sequence=0),
                f"{topic}-ghost")]
    seen: dict[str, object] = {"offsets": offsets}
    seen["stable_before"] = watermarks(bootstrap, topic, isolation="read_committed")
    seen["described"] = without_time(transactions(
        bootstrap, "describe-producers", "--topic", topic, "--partition", "0"), {})
    found = transactions(bootstrap, "find-hanging", "--broker-id", str(node_id),
                         "--max-transaction-timeout", "0")
    seen["hanging"] = without_time([r for r in found if r["Topic"] == topic], {})
    seen["abort"] = transactions(bootstrap, "abort", "--topic", topic, "--partition", "0",
                                 "--start-offset", str(offsets[1]))
    seen["stable_after"] = watermarks(bootstrap, topic, isolation="read_committed")
    seen["high_after"] = watermarks(bootstrap, topic)
    return seen


def test_hanging_transaction_found_and_aborted(
        kafka_unverified: str, headrace_unverified: EmbeddedBroker, topic_name: str) -> None:
    reference = hanging_transaction(kafka_unverified, topic_name)
    ours = hanging_transaction(headrace_unverified.bootstrap_servers, topic_name)
    assert ours == reference
    ghost = str(GHOST_PRODUCER_ID)
    assert reference == {
        "offsets": [0, 2], "stable_before": (0, 2),
        "described": [{"ProducerId": ghost, "ProducerEpoch": "0",
                       "LatestCoordinatorEpoch": "-1", "LastSequence": "0",
                       "CurrentTransactionStartOffset": "2"}],
        "hanging": [{"Topic": topic_name, "Partition": "0", "ProducerId": ghost,
                     "ProducerEpoch": "0", "CoordinatorEpoch": "-1", "StartOffset": "2"}],
        "abort": [],
        "stable_after": (0, 4), "high_after": (0, 4)}
