"""``format("headrace")`` over SASL_SSL: a read and an exactly-once write, with the client
settings passed as ``kafka.*`` options (librdkafka's names)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from pyspark.sql import SparkSession

from headrace.testing import EmbeddedBroker
from tests.integration.tls_support import Pki, make_pki

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedBroker, Pki]]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    with EmbeddedBroker(extra_args=[
            "--listener", "PLAINTEXT://127.0.0.1:0", "--listener", "SASL_SSL://127.0.0.1:0",
            "--ssl-keystore-location", str(pki.server)]) as b:
        done = subprocess.run([sys.executable, "-m", "headrace", "users", "add", "spark",
                               "-b", b.bootstrap_servers], capture_output=True, text=True,
                              env={**os.environ, "HEADRACE_USER_PASSWORD": "spark-secret"},
                              timeout=60)
        assert done.returncode == 0, done.stderr
        yield b, pki


def client(b: EmbeddedBroker, pki: Pki) -> dict[str, str]:
    return {"bootstrap.servers": b.listeners["SASL_SSL"], "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "spark",
            "sasl.password": "spark-secret", "ssl.ca.location": str(pki.ca)}


def test_read_and_exactly_once_write_over_sasl_ssl(
        spark: SparkSession, secure: tuple[EmbeddedBroker, Pki], topic_name: str,
        tmp_path: Path) -> None:
    broker, pki = secure
    conf = client(broker, pki)
    p = Producer(conf)
    for i in range(50):
        p.produce(topic_name, key=b"k%d" % i, value=b"v%d" % i)
    assert p.flush(30) == 0
    options = {f"kafka.{k}": v for k, v in conf.items()}
    q = (spark.readStream.format("headrace").options(**options).option("subscribe", topic_name)
         .option("startingOffsets", "earliest").load()
         .selectExpr("key", "concat(value, '!') AS value")
         .writeStream.format("headrace").options(**options).option("topic", f"{topic_name}-out")
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    c = Consumer({**conf, "group.id": "check", "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(f"{topic_name}-out", 0, 0)])
    got = []
    while True:
        m = c.poll(10)
        assert m is not None
        if m.error() is not None:
            assert m.error().code() == KafkaError._PARTITION_EOF
            break
        got.append(m.value())
    c.close()
    assert sorted(got) == sorted(b"v%d!" % i for i in range(50))
