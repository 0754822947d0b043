"""Tiered storage settings: the broker's (Kafka's ``remote.log.*`` names plus headrace's
store settings) and Kafka's checks of a topic's remote configs against them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from headrace.storage.config import LogConfig
from headrace.storage.errors import InvalidConfigError
from headrace.storage.remote_s3 import S3Settings, S3Storage
from headrace.storage.remote_store import FilesystemStorage, RemoteStorage

STORE_KINDS = ("filesystem", "s3")


@dataclass(frozen=True)
class RemoteLogConfig:
    """Broker settings of tiered storage. Off unless ``system_enable``
    (Kafka's ``remote.log.storage.system.enable``)."""

    system_enable: bool = False
    # headrace.remote.storage.kind: "filesystem" (``path``) or "s3" (``s3``)
    kind: str = "filesystem"
    path: Path | None = None
    s3: S3Settings = field(default_factory=lambda: S3Settings("", "headrace"))
    # Kafka's remote.log.manager.task.interval.ms: how often segments are copied and
    # remote retention runs (30 s there).
    task_interval_ms: int = 30_000
    # Kafka's remote.log.reader.threads: workers serving remote fetches.
    reader_threads: int = 4
    # headrace's: the chunk size of remote reads and the bound of their cache
    chunk_bytes: int = 1024 * 1024
    cache_bytes: int = 64 * 1024 * 1024

    def open_store(self) -> RemoteStorage:
        if self.kind == "s3":
            return S3Storage(self.s3)
        if self.path is None:
            raise InvalidConfigError("headrace.remote.storage.path is required for a "
                                     "filesystem remote store")
        return FilesystemStorage(self.path)


# Broker config names (``--config NAME=VALUE``) of the settings above.
BROKER_NAMES = (
    "remote.log.storage.system.enable", "remote.log.manager.task.interval.ms",
    "remote.log.reader.threads", "headrace.remote.storage.kind",
    "headrace.remote.storage.path", "headrace.remote.storage.s3.endpoint",
    "headrace.remote.storage.s3.bucket", "headrace.remote.storage.s3.access.key",
    "headrace.remote.storage.s3.secret.key", "headrace.remote.storage.s3.region",
    "headrace.remote.storage.s3.timeout.ms",
    "headrace.remote.storage.chunk.bytes", "headrace.remote.storage.cache.bytes",
)


def remote_log_config(configs: Mapping[str, str]) -> RemoteLogConfig:
    """The settings from broker config names (``InvalidConfigError`` for a bad value).
    S3 credentials default to ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``."""
    def get(name: str, default: str) -> str:
        return configs.get(name, default).strip()

    def num(name: str, default: int, minimum: int) -> int:
        raw = get(name, str(default))
        if not raw.lstrip("-").isdigit() or int(raw) < minimum:
            raise InvalidConfigError(f"Invalid value {raw} for configuration {name}: "
                                     f"must be an integer of at least {minimum}")
        return int(raw)

    enable = get("remote.log.storage.system.enable", "false").lower()
    if enable not in ("true", "false"):
        raise InvalidConfigError(f"Invalid value {enable} for configuration "
                                 "remote.log.storage.system.enable: Expected value to be "
                                 "either true or false")
    kind = get("headrace.remote.storage.kind", "filesystem")
    if kind not in STORE_KINDS:
        raise InvalidConfigError(f"Invalid value {kind} for configuration "
                                 f"headrace.remote.storage.kind: one of {', '.join(STORE_KINDS)}")
    path = get("headrace.remote.storage.path", "")
    s3 = S3Settings(
        endpoint=get("headrace.remote.storage.s3.endpoint", ""),
        bucket=get("headrace.remote.storage.s3.bucket", "headrace"),
        access_key=get("headrace.remote.storage.s3.access.key",
                       os.environ.get("AWS_ACCESS_KEY_ID", "")),
        secret_key=get("headrace.remote.storage.s3.secret.key",
                       os.environ.get("AWS_SECRET_ACCESS_KEY", "")),
        region=get("headrace.remote.storage.s3.region", "us-east-1"),
        timeout=num("headrace.remote.storage.s3.timeout.ms", 5000, 1) / 1000)
    config = RemoteLogConfig(
        system_enable=enable == "true", kind=kind, path=Path(path) if path else None, s3=s3,
        task_interval_ms=num("remote.log.manager.task.interval.ms", 30_000, 1),
        reader_threads=num("remote.log.reader.threads", 4, 1),
        chunk_bytes=num("headrace.remote.storage.chunk.bytes", 1024 * 1024, 4096),
        cache_bytes=num("headrace.remote.storage.cache.bytes", 64 * 1024 * 1024, 0))
    if config.system_enable and kind == "filesystem" and config.path is None:
        raise InvalidConfigError("headrace.remote.storage.path is required with "
                                 "headrace.remote.storage.kind=filesystem")
    return config


def check_remote_topic_config(config: LogConfig, system_enable: bool,
                              was_enabled: bool = False) -> None:
    """Kafka's checks of a topic's tiered-storage configs (``InvalidConfigError`` with
    Kafka's messages): the broker must have tiered storage on, the topic must not be
    compacted, the local retention must not exceed the total, and remote storage, once
    on, cannot be turned off (Kafka asks for remote.log.delete.on.disable, not served)."""
    if was_enabled and not config.remote_storage_enable:
        raise InvalidConfigError(
            "It is invalid to disable remote storage without deleting remote data. If you "
            "want to keep the remote data and turn to read only, please set "
            "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to "
            "disable remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`.")
    if not config.remote_storage_enable:
        return
    if not system_enable:
        raise InvalidConfigError("Tiered Storage functionality is disabled in the broker. "
                                 "Topic cannot be configured with remote log storage.")
    if config.compact:
        raise InvalidConfigError("Remote log storage only supports topics with "
                                 "cleanup.policy=delete or cleanup.policy being an empty list.")
    for local_name, local, total_name, total in (
            ("local.retention.ms", config.local_retention_ms, "retention.ms",
             config.retention_ms),
            ("local.retention.bytes", config.local_retention_bytes, "retention.bytes",
             config.retention_bytes)):
        if local == -2 or total == -1:
            continue
        if local == -1:
            raise InvalidConfigError(f"Invalid value -1 for configuration {local_name}: "
                                     f"Value must not be -1 as {total_name} value is set as "
                                     f"{total}.")
        if local > total:
            raise InvalidConfigError(f"Invalid value {local} for configuration {local_name}: "
                                     f"Value must not be more than {total_name} property "
                                     f"value: {total}")
