"""Dynamic broker configs through real admin clients: AlterConfigs/IncrementalAlterConfigs
on the broker resource ("0", this node) and the cluster-wide default ("", which
confluent-kafka and kafka-python cannot address: sent raw), DescribeConfigs sources
(DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG) and synonyms as Kafka 4.3 answers
(checked with headrace.testing.ApacheKafka), the effect on topics without an override, a
restart keeping them, and Kafka's INVALID_REQUEST for read-only or invalid settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.rawclient import RawClient
from tests.integration.test_topic_configs import create, describe

_IacResource = IncrementalAlterConfigsRequest.AlterConfigsResource
_IacConfig = _IacResource.AlterableConfig


def alter_broker(broker: EmbeddedBroker, name: str, value: str) -> None:
    client = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([resource])[resource].result(scaled(10))


def alter_cluster_default(broker: EmbeddedBroker, name: str, value: str | None) -> Any:
    resource = _IacResource(resource_type=4, resource_name="", configs=[
        _IacConfig(name=name, config_operation=0 if value is not None else 1, value=value)])
    with RawClient(broker.bootstrap_servers) as raw:
        answer = raw.request(IncrementalAlterConfigsRequest(resources=[resource],
                                                            validate_only=False), version=1)
    return answer.responses[0]


def describe_broker(broker: EmbeddedBroker, name: str) -> dict[str, Any]:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name=name, configuration_keys=None)
    with RawClient(broker.bootstrap_servers) as raw:
        answer = raw.request(DescribeConfigsRequest(resources=[resource], include_synonyms=True,
                                                    include_documentation=False), version=4)
    return {c.name: c for c in answer.results[0].configs}


def test_dynamic_broker_configs(tmp_path: Path, topic_name: str) -> None:
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        create(broker, topic_name)
        create(broker, topic_name + "-own", **{"retention.ms": "1000"})
        alter_broker(broker, "log.retention.ms", "3600000")
        answer = alter_cluster_default(broker, "log.cleaner.delete.retention.ms", "5000")
        assert answer.error_code == 0, answer

        # kafka-python: alter on the broker resource, describe with sources.
        kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        try:
            kp.alter_configs([KpConfigResource(ConfigResourceType.BROKER, "0",
                                               configs={"log.segment.bytes": "2097152"})])
        finally:
            kp.close()
        check_dynamic(broker, topic_name)

    with EmbeddedBroker(data_dir=tmp_path) as broker:  # restarted: still there
        check_dynamic(broker, topic_name)
        # Deleting the cluster-wide default gives the topic Kafka's default back.
        assert alter_cluster_default(broker, "log.cleaner.delete.retention.ms", None).error_code == 0
        configs = describe(broker, topic_name)
        assert (configs["delete.retention.ms"].value, configs["delete.retention.ms"].source) == (
            "86400000", ConfigSource.DEFAULT_CONFIG.value)


def check_dynamic(broker: EmbeddedBroker, topic: str) -> None:
    configs = describe(broker, topic)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert (configs["delete.retention.ms"].value, configs["delete.retention.ms"].source) == (
        "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert configs["segment.bytes"].value == "2097152"
    own = describe(broker, topic + "-own")  # a topic override still wins
    assert (own["retention.ms"].value, own["retention.ms"].source) == (
        "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)

    node = describe_broker(broker, "0")
    entry = node["log.retention.ms"]
    assert (entry.value, entry.config_source, entry.read_only) == ("3600000", 2, False)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.ms", "3600000", 2), ("log.retention.ms", "604800000", 5)]
    assert node["log.cleaner.delete.retention.ms"].config_source == 3
    assert node["log.dirs"].read_only and node["log.dirs"].config_source == 4
    cluster = describe_broker(broker, "")
    assert {n: (c.value, c.config_source) for n, c in cluster.items()} == {
        "log.cleaner.delete.retention.ms": ("5000", 3)}


@pytest.mark.parametrize(("name", "value", "message"), [
    ("num.partitions", "3", "Cannot update these configs dynamically: [num.partitions]"),
    ("log.dirs", "/x", "Cannot update these configs dynamically: [log.dirs]"),
    ("log.segment.bytes", "1",
     "Invalid value 1 for configuration log.segment.bytes: Value must be at least 1048576"),
])
def test_read_only_or_invalid_broker_config(tmp_path: Path, name: str, value: str,
                                            message: str) -> None:
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        with pytest.raises(KafkaException) as info:
            alter_broker(broker, name, value)
        error = info.value.args[0]
        assert error.code() == KafkaError.INVALID_REQUEST
        assert message in error.str()
        answer = alter_cluster_default(broker, name, value)
        assert (answer.error_code, answer.error_message) == (42, message)
