"""All topics and partitions of one broker's data directory.

Layout::

    DATA_DIR/
      meta.json                  cluster id
      .clean_shutdown            present only after a clean shutdown
      __topics/<topic>.json      topic id, partition count, config overrides
      __remote_deletes/<name>    remote objects of a deleted tiered topic, still to delete
      <topic>-<partition>/       one PartitionLog each

Topic metadata is written atomically (temp file, fsync, rename) before any partition
directory exists, so a crash never leaves a topic half-created. Deleting renames the
metadata away first, then removes the partition directories.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from headrace.storage.config import RENAMED, LogConfig, canonical_overrides
from headrace.storage.dynamic_config import DynamicBrokerConfigs
from headrace.storage.errors import (
    InvalidConfigError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
)
from headrace.storage.log import CLEAN_SHUTDOWN_FILE, PartitionLog, fsync_dir
from headrace.storage.remote_config import check_remote_topic_config
from headrace.storage.remote_metadata import METADATA_FILE, RemoteLogMetadata
from headrace.storage.tiered_log import remote_prefix

logger = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000
REMOTE_DELETES = "__remote_deletes"
# Each partition is a directory and three open files; refuse counts that would only
# exhaust the machine.
MAX_PARTITIONS_PER_TOPIC = 10_000
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    config_overrides: dict[str, str]
    config: LogConfig
    partitions: list[PartitionLog] = field(default_factory=list)


def validate_topic_name(name: str) -> None:
    """Raise ``InvalidTopicError`` unless ``name`` is a legal Kafka topic name."""
    if name in (".", "..") or not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"illegal topic name {name!r}: use 1-249 of [a-zA-Z0-9._-], not '.' or '..'"
        )


class LogManager:
    """Owns every PartitionLog. Not thread-safe; the broker calls it from its event loop."""

    def __init__(self, data_dir: Path, default_config: LogConfig,
                 remote_system_enable: bool = False) -> None:
        """``remote_system_enable``: Kafka's remote.log.storage.system.enable; topics may
        turn remote storage on only with it."""
        self.data_dir = data_dir
        self.remote_system_enable = remote_system_enable
        self.topics: dict[str, Topic] = {}
        data_dir.mkdir(parents=True, exist_ok=True)
        # Topic defaults: start-up settings, then the dynamic broker configs (persisted).
        self.static_config = default_config
        self.dynamic = DynamicBrokerConfigs.load(data_dir)
        self.default_config = self.dynamic.apply(default_config)
        (data_dir / "__topics").mkdir(exist_ok=True)
        (data_dir / REMOTE_DELETES).mkdir(exist_ok=True)
        marker = data_dir / CLEAN_SHUTDOWN_FILE
        self.recovered_uncleanly = not marker.exists() and any(data_dir.glob("__topics/*.json"))
        if marker.exists():
            marker.unlink()
            fsync_dir(data_dir)  # a power loss from here on must count as unclean
        self.cluster_id = self._load_cluster_id()
        self.truncated_bytes = 0
        for meta in sorted((data_dir / "__topics").glob("*.json")):
            self._load_topic(meta)

    def _load_cluster_id(self) -> str:
        path = self.data_dir / "meta.json"
        if path.exists():
            meta = json.loads(path.read_text())
            self._producer_id_next = self._producer_id_limit = int(meta.get("producer_id_limit", 0))
            return str(meta["cluster_id"])
        cluster_id = _short_uuid()
        self._producer_id_next = self._producer_id_limit = 0
        _write_atomic(path, json.dumps({"cluster_id": cluster_id, "producer_id_limit": 0}))
        return cluster_id

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before by this data directory, even across
        crashes: ids are reserved in persisted blocks of ``PRODUCER_ID_BLOCK``."""
        if self._producer_id_next >= self._producer_id_limit:
            self._producer_id_limit += PRODUCER_ID_BLOCK
            _write_atomic(self.data_dir / "meta.json", json.dumps(
                {"cluster_id": self.cluster_id, "producer_id_limit": self._producer_id_limit}))
        pid = self._producer_id_next
        self._producer_id_next += 1
        return pid

    def _load_topic(self, meta: Path) -> None:
        info = json.loads(meta.read_text())
        overrides: dict[str, str] = {}
        for stored, value in dict(info.get("configs", {})).items():
            name = RENAMED.get(str(stored), str(stored))
            try:  # a value valid for an older version must not keep the broker down
                overrides.update(canonical_overrides({name: value}))
            except InvalidConfigError as e:
                logger.warning("topic %s: ignoring stored config override: %s", info["name"], e)
        topic = Topic(info["name"], uuid.UUID(info["topic_id"]), overrides,
                      self.default_config.with_overrides(overrides))
        for p in range(int(info["partitions"])):
            log = PartitionLog(self._partition_dir(topic.name, p), topic.config,
                               recover_fully=self.recovered_uncleanly)
            self.truncated_bytes += log.truncated_bytes
            topic.partitions.append(log)
            self._attach_remote(topic, p, log)
        self.topics[topic.name] = topic

    def _attach_remote(self, topic: Topic, partition: int, log: PartitionLog) -> None:
        """Give a tiered partition its remote log metadata (also when the topic turned
        remote storage off or the broker's switch is off: its remote part stays known)."""
        if (topic.config.remote_storage_enable or (log.directory / METADATA_FILE).exists()
                ) and not self.remote_system_enable and partition == 0:
            logger.warning("topic %s has data in remote storage, but tiered storage is off "
                           "on this broker (remote.log.storage.system.enable): only its local "
                           "part is served", topic.name)
        if log.remote is None and self.remote_system_enable and (
                topic.config.remote_storage_enable or (log.directory / METADATA_FILE).exists()):
            log.attach_remote(RemoteLogMetadata.load(
                log.directory, remote_prefix(topic.name, str(topic.topic_id), partition)))

    def _partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _save_topic(self, topic: Topic, partitions: int | None = None) -> None:
        _write_atomic(self.data_dir / "__topics" / f"{topic.name}.json", json.dumps({
            "name": topic.name,
            "topic_id": str(topic.topic_id),
            "partitions": len(topic.partitions) if partitions is None else partitions,
            "configs": topic.config_overrides,
        }))

    # --- topics -----------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None,
                     validate_only: bool = False) -> Topic:
        """Create a topic with ``partitions`` empty partitions. Raises ``InvalidTopicError``,
        ``TopicExistsError``, ``InvalidConfigError`` (a bad config name or value) or
        ``ValueError`` (a bad partition count). Overrides are stored canonically."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise ValueError(f"number of partitions must be in [1, {MAX_PARTITIONS_PER_TOPIC}],"
                             f" got {partitions}")
        overrides = canonical_overrides(configs or {})
        topic = Topic(name, uuid.uuid4(), overrides, self.default_config.with_overrides(overrides))
        check_remote_topic_config(topic.config, self.remote_system_enable)
        if validate_only:
            return topic
        self._save_topic(topic, partitions)
        for p in range(partitions):
            # Leftovers of a delete interrupted by a crash must not come back to life.
            shutil.rmtree(self._partition_dir(name, p), ignore_errors=True)
            topic.partitions.append(
                PartitionLog(self._partition_dir(name, p), topic.config, recover_fully=False))
            self._attach_remote(topic, p, topic.partitions[-1])
        self.topics[name] = topic
        return topic

    def delete_topic(self, name: str) -> Topic:
        topic = self.get_topic(name)
        if any(log.remote is not None for log in topic.partitions):
            # Recorded before the topic goes, so its objects are never orphaned: the
            # tiering task deletes them (``pending_remote_deletes``).
            _write_atomic(self.data_dir / REMOTE_DELETES / f"{name}-{topic.topic_id}",
                          f"{name}-{topic.topic_id}/")
        (self.data_dir / "__topics" / f"{name}.json").unlink()
        del self.topics[name]
        for log in topic.partitions:
            log.delete()
        return topic

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        """Grow ``name`` to ``total`` partitions (never shrinks: ``ValueError``)."""
        topic = self.get_topic(name)
        if total > MAX_PARTITIONS_PER_TOPIC:
            raise ValueError(f"at most {MAX_PARTITIONS_PER_TOPIC} partitions per topic")
        if total <= len(topic.partitions):
            raise ValueError(f"topic {name!r} has {len(topic.partitions)} partitions; "
                             f"the new count must be larger, got {total}")
        if validate_only:
            return
        for p in range(len(topic.partitions), total):
            topic.partitions.append(
                PartitionLog(self._partition_dir(name, p), topic.config, recover_fully=False))
            self._attach_remote(topic, p, topic.partitions[-1])
        self._save_topic(topic)

    def alter_configs(self, name: str, overrides: dict[str, str]) -> None:
        """Replace the topic's config overrides (validated first: ``InvalidConfigError``).
        New values apply to later appends, rolls, retention checks and cleaning passes;
        existing segment files are not rewritten."""
        topic = self.get_topic(name)
        overrides = canonical_overrides(overrides)
        config = self.default_config.with_overrides(overrides)
        check_remote_topic_config(config, self.remote_system_enable,
                                  topic.config.remote_storage_enable)
        topic.config_overrides = dict(overrides)
        topic.config = config
        for p, log in enumerate(topic.partitions):
            log.config = config
            self._attach_remote(topic, p, log)
        self._save_topic(topic)

    def alter_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        """Replace a dynamic broker config layer (``dynamic_config.CLUSTER`` or ``BROKER``),
        persisted before returning; every topic without its own override follows at once.
        ``InvalidConfigError`` (nothing changed) for an invalid or read-only one."""
        self.dynamic.alter(scope, configs)
        self.default_config = self.dynamic.apply(self.static_config)
        for topic in self.topics.values():
            topic.config = self.default_config.with_overrides(topic.config_overrides)
            for log in topic.partitions:
                log.config = topic.config

    def pending_remote_deletes(self) -> list[tuple[Path, str]]:
        """``(marker, object key prefix)`` of deleted tiered topics whose objects are
        still to delete; remove the marker once they are gone."""
        return [(p, p.read_text()) for p in sorted((self.data_dir / REMOTE_DELETES).iterdir())
                if not p.name.endswith(".tmp")]

    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return topic

    def get_log(self, name: str, partition: int) -> PartitionLog:
        topic = self.get_topic(name)
        if not 0 <= partition < len(topic.partitions):
            raise UnknownTopicError(f"unknown partition {name}-{partition}")
        return topic.partitions[partition]

    def all_logs(self) -> list[PartitionLog]:
        return [log for t in self.topics.values() for log in t.partitions]

    def close(self) -> None:
        """Flush and close everything, then mark the shutdown clean."""
        for log in self.all_logs():
            log.flush(full=True)
            log.close()
        (self.data_dir / CLEAN_SHUTDOWN_FILE).touch()


def _short_uuid() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


__all__ = ["LogManager", "Topic", "validate_topic_name"]
