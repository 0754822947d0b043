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

from headrace.testing import EmbeddedBroker, scaled
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
                              timeout=scaled(60))
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
    assert p.flush(scaled(30)) == 0
    options = {f"kafka.{k}": v for k, v in conf.items()}
    q = (spark.readStream.format("headrace").options(**options).option("subscribe", topic_name)
         .option("startingOffsets", "earliest").load()
         .selectExpr("key", "concat(value, '!') AS value")
         .writeStream.format("headrace").options(**options).option("topic", f"{topic_name}-out")
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    q.awaitTermination(scaled(180))
    assert q.exception() is None, q.exception()
    c = Consumer({**conf, "group.id": "check", "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(f"{topic_name}-out", 0, 0)])
    got = []
    while True:
        m = c.poll(scaled(10))
        assert m is not None
        if m.error() is not None:
            assert m.error().code() == KafkaError._PARTITION_EOF
            break
        got.append(m.value())
    c.close()
    assert sorted(got) == sorted(b"v%d!" % i for i in range(50))


def java_options(b: EmbeddedBroker, pki: Pki, user: str = "spark",
                 password: str = "spark-secret") -> dict[str, str]:
    """Spark's own connector (the Java client) over SASL_SSL: SCRAM-SHA-512 through JAAS,
    the CA as a PEM truststore."""
    return {"kafka.bootstrap.servers": b.listeners["SASL_SSL"],
            "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                      f'required username="{user}" password="{password}";',
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(pki.ca)}


def test_spark_kafka_connector_over_sasl_ssl(
        spark: SparkSession, secure: tuple[EmbeddedBroker, Pki], topic_name: str) -> None:
    """The Java client (spark-sql-kafka) writes and reads back over SCRAM and TLS."""
    broker, pki = secure
    opts = java_options(broker, pki)
    rows = spark.range(40).selectExpr("CAST(id AS STRING) AS key",
                                      "CONCAT('java-', CAST(id AS STRING)) AS value")
    rows.write.format("kafka").options(**opts).option("topic", topic_name).save()
    back = (spark.read.format("kafka").options(**opts).option("subscribe", topic_name)
            .option("startingOffsets", "earliest").load()
            .selectExpr("CAST(value AS STRING) AS v").collect())
    assert sorted(r.v for r in back) == sorted(f"java-{i}" for i in range(40))


def test_spark_kafka_connector_is_refused_without_an_acl(
        spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, topic_name: str) -> None:
    """With ACLs on, the Java client reads the topic it may read and gets Kafka's
    TopicAuthorizationException for the one it may not."""
    pki = make_pki(tmp_path_factory.mktemp("pki-acl"))
    with EmbeddedBroker(extra_args=[
            "--listener", "PLAINTEXT://127.0.0.1:0", "--listener", "SASL_SSL://127.0.0.1:0",
            "--ssl-keystore-location", str(pki.server), "--authorizer",
            "--super-users", "User:ANONYMOUS"]) as b:
        def headrace(*args: str) -> None:
            done = subprocess.run([sys.executable, "-m", "headrace", *args, "-b",
                                   b.bootstrap_servers], capture_output=True, text=True,
                                  env={**os.environ, "HEADRACE_USER_PASSWORD": "pw"},
                                  timeout=scaled(60))
            assert done.returncode == 0, done.stderr
        headrace("users", "add", "reader")
        for name in (f"{topic_name}-open", f"{topic_name}-closed"):
            headrace("topics", "create", name)
        headrace("acls", "add", "--principal", "User:reader", "--operation", "READ",
                 "--topic", f"{topic_name}-open")
        p = Producer({"bootstrap.servers": b.bootstrap_servers})
        p.produce(f"{topic_name}-open", b"allowed")
        p.produce(f"{topic_name}-closed", b"refused")
        assert p.flush(scaled(30)) == 0
        opts = java_options(b, pki, "reader", "pw")

        def read(topic: str) -> list[str]:
            return [r.v for r in spark.read.format("kafka").options(**opts)
                    .option("subscribe", topic).option("startingOffsets", "earliest").load()
                    .selectExpr("CAST(value AS STRING) AS v").collect()]
        assert read(f"{topic_name}-open") == ["allowed"]
        with pytest.raises(Exception, match=r"TopicAuthorizationException|Not authorized"):
            read(f"{topic_name}-closed")
