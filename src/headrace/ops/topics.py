"""Topic administration through confluent-kafka's ``AdminClient``.

Blocking, fail-fast and error contracts: ``headrace.ops.admin``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from headrace.ops.admin import AdminSession, KnownErrors, translate
from headrace.ops.clients import (
    CLIENT_ID,
    error_text,
    kafka_error,
    kafka_python_settings,
    topic_metadata,
    wait_future,
)
from headrace.ops.errors import (
    InvalidConfigError,
    KafkaRequestError,
    TopicExistsError,
    UnknownTopicError,
)

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
class PartitionStorage:
    """Where a tiered partition's records are: offsets ``[log_start, end)`` in all,
    ``[local_start, end)`` on the broker's disk, ``[log_start, tiered_end)`` in the
    object store (``tiered_end`` -1: nothing there yet); sizes in bytes (-1: unknown)."""

    partition: int
    log_start: int
    local_start: int
    tiered_end: int
    end: int
    local_bytes: int
    remote_bytes: int


@dataclass(frozen=True)
class TopicDescription:
    """What ``topics describe`` shows: partitions in id order, configs in name order, and
    for a tiered topic (remote.storage.enable) its local and remote parts."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: tuple[TopicConfig, ...]
    storage: tuple[PartitionStorage, ...] = ()

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


class TopicAdmin(AdminSession):
    """Topic operations against the cluster reachable at ``bootstrap_servers``."""

    def create(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
    ) -> None:
        """Create topic ``name``; ``partitions=None`` takes the broker's ``num.partitions``
        and ``replication_factor=None`` its ``default.replication.factor`` (CreateTopics'
        -1), so a topic made on a replicated cluster is replicated as the cluster says.

        Returns once the controller created it. Not idempotent: ``TopicExistsError`` if it
        exists already.
        """
        self.metadata()
        new_topic = NewTopic(
            name,
            num_partitions=-1 if partitions is None else partitions,
            replication_factor=-1 if replication_factor is None else replication_factor,
            config=dict(configs or {}),
        )
        futures = self._admin.create_topics(
            [new_topic], request_timeout=self._timeout, operation_timeout=self._timeout
        )
        exists = {
            KafkaError.TOPIC_ALREADY_EXISTS: TopicExistsError(f"topic {name!r} already exists")
        }
        self._call(futures[name], f"cannot create topic {name!r}", exists)

    def list_topics(self) -> list[TopicSummary]:
        """All topics the broker lists, internal ones included, sorted by name."""
        metadata = self.metadata()
        return sorted(
            (TopicSummary(name, len(t.partitions)) for name, t in metadata.topics.items()),
            key=lambda t: t.name,
        )

    def partition_count(self, name: str) -> int:
        """The number of partitions of ``name``; ``UnknownTopicError`` if it does not exist."""
        return len(self.partitions(name))

    def describe(self, name: str) -> TopicDescription:
        """Partitions (with leaders, replicas, ISR) and configs of topic ``name``."""
        topic = topic_metadata(self.metadata(name), name)
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
        what = f"cannot read the configs of topic {name!r}"
        entries: dict[str, ConfigEntry] = self._call(futures[resource], what, _unknown(name))
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
        tiered = any(c.name == "remote.storage.enable" and c.value == "true" for c in configs)
        storage = self.storage(name, [p.partition for p in partitions]) if tiered else ()
        return TopicDescription(name=name, partitions=partitions, configs=configs,
                                storage=storage)

    def storage(self, name: str, partitions: list[int]) -> tuple[PartitionStorage, ...]:
        """The local and remote parts of a tiered topic's partitions: ListOffsets'
        earliest (-2), earliest-local (-4), latest-tiered (-5) and latest specs, and the
        sizes DescribeLogDirs reports for the data directory and the ``remote:`` one."""
        specs, local, remote = _tier_facts(self.bootstrap_servers, self._timeout, name,
                                           partitions)
        return tuple(PartitionStorage(
            partition=p, log_start=specs[-2][p], local_start=specs[-4][p],
            tiered_end=specs[-5][p] + 1 if specs[-5][p] >= 0 else -1, end=specs[-1][p],
            local_bytes=local.get(p, -1), remote_bytes=remote.get(p, -1)) for p in partitions)

    def alter_configs(self, name: str, set_: dict[str, str] | None = None,
                      delete: list[str] | None = None, append: dict[str, str] | None = None,
                      subtract: dict[str, str] | None = None) -> None:
        """Change topic configs with IncrementalAlterConfigs: ``set_`` overrides, ``delete``
        returns configs to the broker default, ``append``/``subtract`` add or remove items
        of list configs (cleanup.policy). All or nothing: the broker validates every change
        first. ``InvalidConfigError`` with the broker's explanation for a bad name or value,
        ``UnknownTopicError`` if the topic does not exist."""
        self.metadata()
        ops = [(k, v, AlterConfigOpType.SET) for k, v in (set_ or {}).items()]
        ops += [(k, "", AlterConfigOpType.DELETE) for k in delete or []]
        ops += [(k, v, AlterConfigOpType.APPEND) for k, v in (append or {}).items()]
        ops += [(k, v, AlterConfigOpType.SUBTRACT) for k, v in (subtract or {}).items()]
        entries = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops]
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        futures = self._admin.incremental_alter_configs([resource], request_timeout=self._timeout)
        what = f"cannot alter the configs of topic {name!r}"
        try:
            wait_future(futures[resource], self._timeout, what)
        except KafkaException as e:
            error = kafka_error(e)
            message = f"{what}: {error_text(error)}"
            if error.code() == KafkaError.INVALID_CONFIG:
                raise InvalidConfigError(message) from e
            raise translate(error.code(), _unknown(name), message) from e

    def delete(self, name: str) -> None:
        """Delete topic ``name``; ``UnknownTopicError`` if it does not exist."""
        self.metadata()
        futures = self._admin.delete_topics(
            [name], request_timeout=self._timeout, operation_timeout=self._timeout
        )
        self._call(futures[name], f"cannot delete topic {name!r}", _unknown(name))


def _tier_facts(bootstrap_servers: str, timeout: float, topic: str, partitions: list[int],
                ) -> tuple[dict[int, dict[int, int]], dict[int, int], dict[int, int]]:
    """ListOffsets spec -> partition -> offset, and partition -> bytes on local disk and in
    the object store, of ``topic`` (kafka-python: librdkafka refuses the -4/-5 specs and has
    no DescribeLogDirs call). ``KafkaRequestError`` if the offsets cannot be read."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KpTopicPartition
    from kafka.errors import KafkaError as KafkaPythonError

    local: dict[int, int] = {}
    remote: dict[int, int] = {}
    specs: dict[int, dict[int, int]] = {}
    try:
        with KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id=CLIENT_ID,
                              request_timeout_ms=int(timeout * 1000),
                              bootstrap_timeout_ms=int(timeout * 1000),
                              **kafka_python_settings()) as client:
            for spec in (-2, -4, -5, -1):
                found = client.list_partition_offsets(
                    {KpTopicPartition(topic, p): spec for p in partitions})
                specs[spec] = {tp.partition: int(o.offset) for tp, o in found.items()}
            answers: list[dict[str, Any]] = client.describe_log_dirs()
    except (KafkaPythonError, ValueError, OSError) as e:
        raise KafkaRequestError(f"cannot read where {topic!r} is stored: {e}") from e
    for broker in answers:
        for d in broker.get("log_dirs", []):
            into = remote if str(d.get("log_dir", "")).startswith("remote:") else local
            for t in d.get("topics", []):
                if t["name"] == topic:
                    for p in t["partitions"]:
                        into[p["partition_index"]] = (into.get(p["partition_index"], 0)
                                                      + p["partition_size"])
    return specs, local, remote


def _unknown(name: str) -> KnownErrors:
    return {KafkaError.UNKNOWN_TOPIC_OR_PART: UnknownTopicError(f"topic {name!r} does not exist")}


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
