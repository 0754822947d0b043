"""Dynamic broker configs: Kafka's broker-wide topic defaults changed at run time.

Kafka keeps two dynamic layers above ``server.properties`` (here: ``headrace broker -c``):
the cluster-wide default (broker resource ``""``, DYNAMIC_DEFAULT_BROKER_CONFIG) and the
per-broker value (resource ``"<node id>"``, DYNAMIC_BROKER_CONFIG), which wins. Here both
hold the broker names of topic configs (``log.retention.ms``, ``log.cleaner.*`` of
``storage.config.CONFIG_DEFS``); they are persisted as JSON in ``dynamic-broker-configs.json``
in the data directory (written atomically) and apply to every topic without its own override.
Other known broker settings are read-only (``READ_ONLY``), as in Kafka.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from headrace.storage.config import BROKER_SYNONYMS, CONFIG_DEFS, LogConfig
from headrace.storage.errors import InvalidConfigError

DYNAMIC_FILE = "dynamic-broker-configs.json"
CLUSTER, BROKER = "cluster", "broker"
# Broker settings Kafka does not change at run time ("Cannot update these configs
# dynamically"); headrace's other broker settings are fixed at start-up too.
READ_ONLY = frozenset({
    "broker.id", "node.id", "advertised.listeners", "auto.create.topics.enable",
    "num.partitions", "default.replication.factor", "log.dirs", "socket.request.max.bytes",
    "log.retention.check.interval.ms", "log.cleaner.enable", "log.cleaner.backoff.ms",
    "log.cleaner.dedupe.buffer.size", "producer.id.expiration.ms", "headrace.log.flush.on.ack",
    "transaction.partition.verification.enable",
})
# Kafka's broker-level minimum where it is stricter than the topic config's.
_BROKER_MINIMUM = {"log.segment.bytes": 1024 * 1024}


class ReadOnlyConfigError(InvalidConfigError):
    """A broker setting that cannot change at run time (Kafka answers INVALID_REQUEST)."""


def _check(name: str, raw: str) -> str:
    """``raw`` for broker config ``name``, canonical; ``InvalidConfigError`` otherwise."""
    if name in READ_ONLY:
        raise ReadOnlyConfigError(f"Cannot update these configs dynamically: [{name}]")
    defn = CONFIG_DEFS[BROKER_SYNONYMS[name]]
    minimum, text = _BROKER_MINIMUM.get(name), raw.strip()
    if minimum is not None and text.lstrip("-").isdigit() and int(text) < minimum:
        raise InvalidConfigError(
            f"Invalid value {raw} for configuration {name}: Value must be at least {minimum}")
    try:
        value = defn.parse(raw)
    except InvalidConfigError as e:  # Kafka names the broker config here
        raise InvalidConfigError(str(e).replace(f"configuration {defn.name}:",
                                                f"configuration {name}:")) from e
    return defn.format(value)


@dataclass
class DynamicBrokerConfigs:
    """The two dynamic layers, by Kafka's broker names. Mutated only through ``alter``."""

    path: Path
    layers: dict[str, dict[str, str]] = field(
        default_factory=lambda: {CLUSTER: {}, BROKER: {}})

    @classmethod
    def load(cls, data_dir: Path) -> DynamicBrokerConfigs:
        """The layers stored in ``data_dir`` (none yet: empty). Blocking, small read."""
        path = data_dir / DYNAMIC_FILE
        out = cls(path)
        if path.exists():
            stored = json.loads(path.read_text())
            for scope in (CLUSTER, BROKER):
                out.layers[scope] = {str(k): str(v) for k, v in stored.get(scope, {}).items()
                                     if k in BROKER_SYNONYMS}
        return out

    def validated(self, configs: Mapping[str, str]) -> dict[str, str]:
        """``configs`` checked and canonical; names Kafka does not know as broker configs
        are dropped (Kafka accepts and ignores them)."""
        return {name: _check(name, raw) for name, raw in configs.items()
                if name in BROKER_SYNONYMS or name in READ_ONLY}

    def alter(self, scope: str, configs: Mapping[str, str]) -> None:
        """Replace the ``scope`` layer with ``configs`` (validated first) and persist it
        atomically before returning. Blocking (an fsync)."""
        self.layers[scope] = self.validated(configs)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.layers, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def apply(self, static: LogConfig) -> LogConfig:
        """``static`` (the start-up topic defaults) with the cluster, then broker layer."""
        config = static
        for scope in (CLUSTER, BROKER):
            config = config.with_overrides(
                {BROKER_SYNONYMS[n]: v for n, v in self.layers[scope].items()})
        return config
