"""Broker configuration: one frozen value, built by the CLI or by ``EmbeddedBroker``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from headrace.broker.groups.consumer_coordinator import ConsumerGroupConfig
from headrace.broker.groups.coordinator import GroupConfig
from headrace.broker.listeners import Listener, SslConfig
from headrace.broker.security.acls import AuthorizerConfig
from headrace.broker.txn.coordinator import TxnConfig
from headrace.storage.cleaner import CleanerConfig
from headrace.storage.config import LogConfig
from headrace.storage.remote_config import RemoteLogConfig


@dataclass(frozen=True)
class BrokerConfig:
    """Everything a broker process needs to start.

    ``port=0`` binds a free port; the bound address is printed on stdout as
    ``headrace broker listening on HOST:PORT`` once the broker accepts connections.
    """

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    node_id: int = 0
    cluster_id: str | None = None
    auto_create_topics: bool = True
    num_partitions: int = 1
    # Root logging level of the broker process (DEBUG shows each partition fsync).
    log_level: str = "INFO"
    # Largest request frame accepted; bigger frames close the connection (Kafka's
    # socket.request.max.bytes).
    max_request_bytes: int = 100 * 1024 * 1024
    # Topic config defaults for every topic (Kafka's log.* settings; message.max.bytes is
    # ``log.max_message_bytes``).
    log: LogConfig = field(default_factory=LogConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    # How often retention and producer expiry run (Kafka's log.retention.check.interval.ms
    # is 5 minutes; a shorter default suits one small broker).
    retention_check_interval_ms: int = 30_000
    groups: GroupConfig = field(default_factory=GroupConfig)
    consumer_groups: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    txns: TxnConfig = field(default_factory=TxnConfig)
    # Kafka's offsets.topic.num.partitions (50 there; one broker gains nothing from more).
    offsets_topic_partitions: int = 1
    # Committed offsets of an empty group (or standalone commits) are deleted after this
    # (Kafka's offsets.retention.minutes: 7 days), checked every
    # offsets.retention.check.interval.ms (10 minutes).
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    # Largest committed-offset metadata string (Kafka's offset.metadata.max.bytes).
    offset_metadata_max_bytes: int = 4096
    # Serve Prometheus metrics over HTTP on this port (0: a free one; None: off), on
    # ``host``; the address is printed as ``headrace broker metrics on http://...``.
    metrics_port: int | None = None
    # Kafka's listeners (empty: one PLAINTEXT listener on host:port) and ssl.* settings.
    listeners: tuple[Listener, ...] = ()
    ssl: SslConfig = field(default_factory=SslConfig)
    # Kafka's sasl.enabled.mechanisms, for SASL_PLAINTEXT and SASL_SSL listeners.
    sasl_enabled_mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    # KIP-368 (connections.max.reauth.ms): a SASL login lasts this long, then the client
    # must re-authenticate on its connection or be disconnected; 0: forever.
    connections_max_reauth_ms: int = 0
    # ACLs on every API (Kafka's authorizer.class.name, super.users,
    # allow.everyone.if.no.acl.found); off: every client may do everything.
    authorizer: AuthorizerConfig = field(default_factory=AuthorizerConfig)
    # Tiered storage: Kafka's remote.log.storage.system.enable and the object store.
    remote: RemoteLogConfig = field(default_factory=RemoteLogConfig)

    def effective_listeners(self) -> tuple[Listener, ...]:
        """The listeners to open, each with the host it advertises."""
        found = self.listeners or (Listener("PLAINTEXT", self.host, self.port),)
        return tuple(replace(x, advertised_host=x.advertised_host or self.advertised_host or (
            x.host if x.host not in ("", "0.0.0.0", "::") else "127.0.0.1")) for x in found)
