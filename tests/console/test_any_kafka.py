"""The console against Apache Kafka: the same pages, over the Kafka protocol only."""

from __future__ import annotations

import urllib.request
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.testing import ApacheKafka, ConsoleProcess, scaled


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=scaled(60)) as r:
        return str(r.read().decode())


def test_pages_against_apache_kafka(apache_kafka: ApacheKafka) -> None:
    bootstrap = apache_kafka.bootstrap_servers
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(scaled(30))
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        p.produce(topic, key=f"order-{i}".encode(), value=b'{"n": %d}' % i, partition=i % 2,
                  headers=[("trace", f"t-{i}".encode())])
    p.flush(scaled(30))
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 20)],
             asynchronous=False)
    c.close()
    with ConsoleProcess(bootstrap) as web:
        assert topic in get(f"{web.url}/topics")
        page = get(f"{web.url}/topics/{topic}")
        assert "oldest record is" in page and "retention.ms = 604800000" in page
        found = get(f"{web.url}/topics/{topic}/messages?header=trace%3Dt-33")
        assert "1 found in 40 records scanned" in found and "order-33" in found
        lag = get(f"{web.url}/groups/{group}")
        assert "total lag 15 records" in lag
        plan = get(f"{web.url}/transactions")
        assert "Transactions" in plan
