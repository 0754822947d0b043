"""``kafka-configs --describe --all`` (Apache Kafka's own tool) on a topic and on the
broker: headrace lists Kafka 4.3's topic configs exactly, and broker configs only by names
Kafka 4.3 has, plus its own settings under the ``headrace.`` prefix."""

from __future__ import annotations

from kafka.protocol.admin import DescribeClusterRequest

from tests.differential.conftest import Brokers
from tests.differential.support import create_topic
from tests.integration.kafka_tools import kafka_tool
from tests.integration.rawclient import RawClient

OURS = "headrace."


def described(bootstrap: str, *entity: str) -> set[str]:
    done = kafka_tool("kafka-configs", "--bootstrap-server", bootstrap, "--describe", "--all",
                      *entity)
    assert done.returncode == 0, done.stdout + done.stderr
    # "  name=value sensitive=false synonyms={...}" under a "All configs for ..." line
    return {line.strip().split("=", 1)[0] for line in done.stdout.splitlines()
            if line.startswith("  ") and "=" in line}


def names(bootstrap: str, topic: str) -> dict[str, set[str]]:
    create_topic(bootstrap, topic)
    with RawClient(bootstrap) as c:
        node_id = c.request(DescribeClusterRequest(), 0).brokers[0].broker_id
    return {"topic": described(bootstrap, "--entity-type", "topics", "--entity-name", topic),
            "broker": described(bootstrap, "--entity-type", "brokers", "--entity-name",
                                str(node_id))}


def test_described_config_names_are_kafkas(brokers: Brokers, topic_name: str) -> None:
    reference = names(brokers.kafka, topic_name)
    ours = names(brokers.headrace, topic_name)
    assert {n for n in ours["topic"] if not n.startswith(OURS)} == reference["topic"]
    assert {n for n in ours["topic"] if n.startswith(OURS)} == {"headrace.flush.on.ack"}
    assert {n for n in ours["broker"] if not n.startswith(OURS)} <= reference["broker"]
    assert {n for n in ours["broker"] if n.startswith(OURS)} == {"headrace.log.flush.on.ack"}
    assert "message.format.version" not in reference["topic"]
    assert "log.message.format.version" not in reference["broker"]
