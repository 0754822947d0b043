"""``headrace broker --metrics-port``: Prometheus metrics, scraped over HTTP and parsed with
prometheus_client's own text parser, checked against what the clients did."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from headrace.testing import EmbeddedBroker, scaled


@pytest.fixture(scope="module")
def metered() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=["--metrics-port", "0"]) as b:
        yield b


def scrape(broker: EmbeddedBroker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert broker.metrics_url is not None
    with urllib.request.urlopen(broker.metrics_url, timeout=scaled(10)) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_traffic_offsets_and_lag_match_what_clients_did(metered: EmbeddedBroker) -> None:
    bootstrap = metered.bootstrap_servers
    topic = f"metered-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(scaled(10))
    now_ms = int(time.time() * 1000)
    t0 = now_ms - 100_000  # a known producer timeline: record i at t0 + i seconds
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(30):
        producer.produce(topic, key=b"k", value=b"x" * 100, partition=0, timestamp=t0 + i * 1000)
        producer.flush()  # one batch per record: records and timestamps are exact
    for _ in range(7):
        producer.produce(topic, value=b"y" * 10, partition=1)
    producer.flush()
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 7)],
                    asynchronous=False)
    consumer.close()

    before = time.time()
    s = scrape(metered)
    after = time.time()
    assert value(s, "kafka_topic_partitions", topic=topic) == 2
    assert value(s, "kafka_topic_partition_current_offset", topic=topic, partition="0") == 30
    assert value(s, "kafka_topic_partition_current_offset", topic=topic, partition="1") == 7
    assert value(s, "headrace_partition_records_in_total", topic=topic, partition="0") == 30
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 37
    assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) > 30 * 100
    assert value(s, "kafka_log_log_size", topic=topic, partition="0") > 30 * 100
    assert value(s, "kafka_network_requestmetrics_requests_total", request="Produce") >= 31
    assert value(s, "headrace_request_duration_seconds_count", request="Produce") == value(
        s, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert value(s, "headrace_connections_active") >= 1
    labels = {"consumergroup": group, "topic": topic}
    assert value(s, "kafka_consumergroup_current_offset", partition="0", **labels) == 10
    assert value(s, "kafka_consumergroup_lag", partition="0", **labels) == 20
    assert value(s, "kafka_consumergroup_lag", partition="1", **labels) == 0
    assert value(s, "kafka_consumergroup_lag_sum", **labels) == 20
    # The oldest unconsumed record (offset 10) was stamped t0 + 10 s.
    seconds = value(s, "kafka_consumergroup_group_lag_seconds", group=group, topic=topic,
                    partition="0")
    # The broker's clock read during the scrape (0.5 s for rounding), not a speed bound.
    oldest = (t0 + 10_000) / 1000
    assert before - oldest - 0.5 <= seconds <= after - oldest + 0.5
    assert value(s, "kafka_consumergroup_group_lag_seconds", group=group, topic=topic,
                 partition="1") == 0
    assert value(s, "kafka_consumergroup_group_max_lag_seconds", group=group) == seconds

    # Retention deletes what the group never read: no phantom lag, and the age is the
    # oldest record that still exists.
    next(iter(admin.delete_records([TopicPartition(topic, 0, 25)]).values())).result(scaled(10))
    before = time.time()
    s = scrape(metered)
    after = time.time()
    assert value(s, "kafka_topic_partition_oldest_offset", topic=topic, partition="0") == 25
    assert value(s, "kafka_consumergroup_lag", partition="0", **labels) == 5
    seconds = value(s, "kafka_consumergroup_group_lag_seconds", group=group, topic=topic,
                    partition="0")
    oldest = (t0 + 25_000) / 1000
    assert before - oldest - 0.5 <= seconds <= after - oldest + 0.5

    # Fetches count bytes out.
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{group}",
                       "auto.offset.reset": "earliest", "enable.partition.eof": True})
    reader.assign([TopicPartition(topic, 1, 0)])
    got = 0
    while got < 7:
        m = reader.poll(scaled(10))
        assert m is not None
        got += 0 if m.error() else 1
    reader.close()
    s = scrape(metered)
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= 70


def test_groups_and_transactions(metered: EmbeddedBroker) -> None:
    bootstrap = metered.bootstrap_servers
    topic = f"metered-{uuid.uuid4().hex[:6]}"
    group = f"live-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{group}"})
    try:
        producer.init_transactions(scaled(10))
        producer.begin_transaction()
        producer.produce(topic, b"open")
        producer.flush()
        consumer.subscribe([topic])
        deadline = time.monotonic() + scaled(30)
        while time.monotonic() < deadline:
            consumer.poll(0.2)
            s = scrape(metered)
            if value(s, "kafka_consumergroup_members", consumergroup=group) == 1 and s.get(
                    ("headrace_consumergroup_state", (("consumergroup", group),
                                                       ("protocol", "classic"),
                                                       ("state", "Stable")))) == 1:
                break
        else:
            raise AssertionError("the group never showed one stable member")
        assert value(s, "headrace_transactions", state="Ongoing") >= 1
        assert value(s, "headrace_transaction_oldest_open_seconds") >= 0
        assert value(s, "headrace_partition_last_stable_offset", topic=topic, partition="0") \
            < value(s, "kafka_topic_partition_current_offset", topic=topic, partition="0")
        producer.commit_transaction(scaled(10))
    finally:
        consumer.close()


def test_the_metrics_port_refuses_what_it_does_not_serve(metered: EmbeddedBroker) -> None:
    assert metered.metrics_url is not None
    request = urllib.request.Request(metered.metrics_url, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=scaled(10))
    assert e.value.code == 405
    assert value(scrape(metered), "kafka_brokers") == 1  # still serving
