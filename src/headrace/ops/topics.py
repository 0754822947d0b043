"""Topic administration through confluent-kafka's ``AdminClient``.

Every method blocks until the broker answered or ``timeout`` seconds passed, and raises an
``OpsError`` subclass whose message is fit to show the user. Nothing is cached between calls:
each one reflects the broker's state at the time it is made.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from headrace.ops.clients import (
    REQUEST_TIMEOUT_S,
    ClientErrors,
    client_config,
    error_text,
    fetch_metadata,
    kafka_error,
    topic_metadata,
    wait_future,
)
from headrace.ops.errors import KafkaRequestError, TopicExistsError, UnknownTopicError

_SOURCE_NAMES = {
    ConfigSource.DYNAMIC_TOPIC_CONFIG: "topic",
    ConfigSource.DYNAMIC_BROKER_CONFIG: "broker",
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: "broker default",
    ConfigSource.STATIC_BROKER_CONFIG: "broker",
    ConfigSource.DEFAULT_CONFIG: "default",
}


@dataclass(frozen=True)
class TopicSummary:
    """One line of ``topics list``."""

    name: str
    partitions: int


@dataclass(frozen=True)
class PartitionInfo:
    """Placement of one partition; broker ids are Kafka node ids, ``leader`` -1 if none."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str | None = None


@dataclass(frozen=True)
class TopicConfig:
    """One topic config as DescribeConfigs reports it (``value`` is None when sensitive)."""

    name: str
    value: str | None
    source: str
    is_default: bool
    is_read_only: bool


@dataclass(frozen=True)
class TopicDescription:
    """What ``topics describe`` shows: partitions in id order, configs in name order."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: tuple[TopicConfig, ...]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


class TopicAdmin:
    """Topic operations against the cluster reachable at ``bootstrap_servers``.

    Creating one opens no connection; the first call does, and fails fast with
    ``BrokerUnreachableError`` if no broker answers.
    """

    def __init__(self, bootstrap_servers: str, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self._bootstrap_servers = bootstrap_servers
        self._timeout = timeout
        self._errors = ClientErrors()
        # Describing a topic must never create it.
        config = client_config(
            bootstrap_servers, self._errors, **{"allow.auto.create.topics": False}
        )
        self._admin = AdminClient(config)

    def create(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int = 1,
        configs: dict[str, str] | None = None,
    ) -> None:
        """Create topic ``name``; ``partitions=None`` takes the broker's ``num.partitions``.

        Returns once the controller created it. Not idempotent: ``TopicExistsError`` if it
        exists already.
        """
        self._metadata()
        new_topic = NewTopic(
            name,
            num_partitions=-1 if partitions is None else partitions,
            replication_factor=replication_factor,
            config=dict(configs or {}),
        )
        futures = self._admin.create_topics(
            [new_topic], request_timeout=self._timeout, operation_timeout=self._timeout
        )
        try:
            self._wait(futures[name], f"creating topic {name!r}")
        except KafkaException as e:
            error = kafka_error(e)
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicExistsError(f"topic {name!r} already exists") from e
            raise KafkaRequestError(f"cannot create topic {name!r}: {error_text(error)}") from e

    def list_topics(self) -> list[TopicSummary]:
        """All topics the broker lists, internal ones included, sorted by name."""
        metadata = self._metadata()
        return sorted(
            (TopicSummary(name, len(t.partitions)) for name, t in metadata.topics.items()),
            key=lambda t: t.name,
        )

    def partition_count(self, name: str) -> int:
        """The number of partitions of ``name``; ``UnknownTopicError`` if it does not exist."""
        return len(topic_metadata(self._metadata(name), name).partitions)

    def describe(self, name: str) -> TopicDescription:
        """Partitions (with leaders, replicas, ISR) and configs of topic ``name``."""
        topic = topic_metadata(self._metadata(name), name)
        partitions = tuple(
            PartitionInfo(
                partition=p.id,
                leader=p.leader,
                replicas=tuple(p.replicas),
                isr=tuple(p.isrs),
                error=error_text(p.error) if p.error is not None else None,
            )
            for p in sorted(topic.partitions.values(), key=lambda p: p.id)
        )
        resource = ConfigResource(ResourceType.TOPIC, name)
        futures = self._admin.describe_configs([resource], request_timeout=self._timeout)
        try:
            entries: dict[str, ConfigEntry] = self._wait(
                futures[resource], f"describing configs of {name!r}"
            )
        except KafkaException as e:
            error = kafka_error(e)
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise UnknownTopicError(f"topic {name!r} does not exist") from e
            raise KafkaRequestError(
                f"cannot read the configs of topic {name!r}: {error_text(error)}"
            ) from e
        configs = tuple(
            TopicConfig(
                name=entry.name,
                value=entry.value,
                source=_source_name(entry.source),
                is_default=entry.is_default,
                is_read_only=entry.is_read_only,
            )
            for entry in sorted(entries.values(), key=lambda e: e.name)
        )
        return TopicDescription(name=name, partitions=partitions, configs=configs)

    def delete(self, name: str) -> None:
        """Delete topic ``name``; ``UnknownTopicError`` if it does not exist."""
        self._metadata()
        futures = self._admin.delete_topics(
            [name], request_timeout=self._timeout, operation_timeout=self._timeout
        )
        try:
            self._wait(futures[name], f"deleting topic {name!r}")
        except KafkaException as e:
            error = kafka_error(e)
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise UnknownTopicError(f"topic {name!r} does not exist") from e
            raise KafkaRequestError(f"cannot delete topic {name!r}: {error_text(error)}") from e

    def _metadata(self, topic: str | None = None) -> ClusterMetadata:
        return fetch_metadata(
            self._admin, self._errors, self._bootstrap_servers, topic=topic, timeout=self._timeout
        )

    def _wait(self, future: concurrent.futures.Future[Any], what: str) -> Any:
        return wait_future(future, self._timeout, what)


def _source_name(source: ConfigSource | int) -> str:
    # At run time librdkafka hands over a bare int, whatever the type stubs say.
    try:
        return _SOURCE_NAMES.get(ConfigSource(source), "unknown")
    except ValueError:
        return "unknown"


def parse_configs(pairs: list[str]) -> dict[str, str]:
    """Parse ``key=value`` strings (as given to ``--config``); ``ValueError`` if malformed."""
    configs: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"expected NAME=VALUE, got {pair!r}")
        configs[name.strip()] = value
    return configs
