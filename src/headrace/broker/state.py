"""The broker's shared state, and the narrow interface handlers use.

Everything here runs on the broker's one event loop; only fsync runs on a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from headrace.broker import internal_topics
from headrace.broker.config import BrokerConfig
from headrace.broker.counters import BrokerMetrics
from headrace.broker.groups.consumer_coordinator import ConsumerGroupCoordinator
from headrace.broker.groups.coordinator import GroupCoordinator
from headrace.broker.groups.offsets import OffsetStore
from headrace.broker.listeners import BoundListener
from headrace.broker.security.acls import Authorizer
from headrace.broker.security.credentials import CredentialStore
from headrace.broker.security.legacy_topics import migrate
from headrace.broker.tiering import RemoteTier
from headrace.broker.txn.coordinator import TransactionCoordinator
from headrace.broker.txn.log import TransactionLog
from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.storage.errors import UnknownTopicError
from headrace.storage.log import PartitionLog
from headrace.storage.manager import LogManager, Topic
from headrace.storage.metadata_log import MetadataLog

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class AppendNotifier:
    """Wakes long-polling fetches when a partition they wait on gets data."""

    def __init__(self) -> None:
        self._waiters: defaultdict[TopicPartition, set[asyncio.Future[None]]] = defaultdict(set)

    def register(self, partitions: list[TopicPartition]) -> asyncio.Future[None]:
        """A future resolved on the next append to any of ``partitions``; call ``unregister``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for tp in partitions:
            self._waiters[tp].add(fut)
        return fut

    def unregister(self, partitions: list[TopicPartition], fut: asyncio.Future[None]) -> None:
        for tp in partitions:
            waiters = self._waiters.get(tp)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self._waiters[tp]

    def notify(self, tp: TopicPartition) -> None:
        for fut in self._waiters.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)


class GroupCommitFlusher:
    """fsync before acknowledging, shared by every producer waiting at the same time.

    ``await flush(log)`` returns once an fsync that *started after the call* completed:
    concurrent callers ride the same fsync (group commit). One flush runs at a time.
    """

    def __init__(self) -> None:
        self._pending: set[PartitionLog] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._running: asyncio.Task[None] | None = None
        self.fsyncs = 0
        # Logs with a flush.ms timer pending (one timer per log until it fires).
        self._timed: set[PartitionLog] = set()

    def request(self, logs: set[PartitionLog]) -> asyncio.Future[None]:
        """Register now for the next fsync of ``logs``; the future resolves when it is done
        (or fails with KAFKA_STORAGE_ERROR)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._pending |= logs
        self._waiters.append(fut)
        if self._running is None or self._running.done():
            self._running = loop.create_task(self._run())
        return fut

    async def flush(self, logs: set[PartitionLog]) -> None:
        await self.request(logs)

    def flush_soon(self, logs: set[PartitionLog]) -> None:
        """Start an fsync of ``logs`` nobody waits for (acks=0 produce past flush.messages);
        a failure is logged, the next flush retries."""
        self.request(logs).add_done_callback(_log_failure)

    def flush_later(self, partition_log: PartitionLog, delay_ms: int) -> None:
        """fsync ``partition_log`` within ``delay_ms`` (Kafka's flush.ms), unless a timer is
        already pending for it. Called after an append on the event loop; idempotent."""
        if partition_log in self._timed:
            return
        self._timed.add(partition_log)

        def fire() -> None:
            self._timed.discard(partition_log)
            if not partition_log.closed:
                self.flush_soon({partition_log})

        asyncio.get_running_loop().call_later(delay_ms / 1000, fire)

    async def _run(self) -> None:
        while self._waiters:
            logs, self._pending = self._pending, set()
            waiters, self._waiters = self._waiters, []
            try:
                await asyncio.to_thread(_flush_all, logs)
                self.fsyncs += 1
                for w in waiters:
                    if not w.done():
                        w.set_result(None)
            except OSError as e:
                for w in waiters:
                    if not w.done():
                        w.set_exception(KafkaProtocolError(ErrorCode.KAFKA_STORAGE_ERROR, str(e)))


def _log_failure(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("background flush failed: %s", fut.exception())


def _flush_all(logs: set[PartitionLog]) -> None:
    for partition_log in logs:
        partition_log.flush()


@dataclass
class BrokerState:
    """What handlers may touch: config, logs, groups, and the notification/flush helpers."""

    config: BrokerConfig
    logs: LogManager
    notifier: AppendNotifier
    flusher: GroupCommitFlusher
    groups: GroupCoordinator
    offsets: OffsetStore
    txns: TransactionCoordinator
    consumer_groups: ConsumerGroupCoordinator
    credentials: CredentialStore
    authorizer: Authorizer
    port: int = 0
    metrics: BrokerMetrics = field(default_factory=BrokerMetrics)
    listeners: list[BoundListener] = field(default_factory=list)
    # Tiered storage, when the broker has it on (remote.log.storage.system.enable).
    remote: RemoteTier | None = None

    @classmethod
    def open(cls, config: BrokerConfig) -> BrokerState:
        """Recover the logs, replay committed offsets, restore known groups (classic
        ones Empty, at their last generation: their members rejoin after a restart;
        KIP-848 consumer groups whole: members, epochs, assignments), replay the
        transaction log, completing transactions a crash left half-done, and load the
        credentials and ACLs from the metadata log (migrating the legacy topics first)."""
        logs = LogManager(config.data_dir, config.log, config.remote.system_enable)
        offsets = OffsetStore(logs, config.offsets_topic_partitions)
        offsets.load()
        groups = GroupCoordinator(config.groups, on_generation=offsets.record_group)
        for group_id in (set(offsets.groups) | set(offsets.offsets)) - set(
                offsets.consumer_records):
            group = groups.get_or_create(group_id)
            record = offsets.groups.get(group_id)
            if record is not None:
                group.generation_id = record.generation_id
                group.protocol_type = record.protocol_type or None
        notifier = AppendNotifier()
        txns = TransactionCoordinator(config.txns, logs, TransactionLog(logs), offsets,
                                      logs.allocate_producer_id,
                                      lambda topic, p: notifier.notify((topic, p)))
        txns.recover()

        def classic_in_use(group_id: str) -> bool:
            group = groups.group(group_id)
            return group is not None and bool(group.members)

        def topics() -> dict[str, tuple[uuid.UUID, int]]:
            return {t.name: (t.topic_id, len(t.partitions)) for t in logs.topics.values()}

        def drop_classic(group_id: str) -> None:
            groups.groups.pop(group_id, None)

        consumer_groups = ConsumerGroupCoordinator(config.consumer_groups, topics,
                                                   classic_in_use, drop_classic,
                                                   persist=offsets.write_consumer_records)
        consumer_groups.restore(offsets.consumer_records)
        groups.is_foreign = lambda group_id: group_id in consumer_groups.groups
        # Credentials and ACLs: in the metadata log, out of every request's reach.
        metadata = MetadataLog(config.data_dir)
        migrate(logs, metadata)
        credentials = CredentialStore(metadata)
        credentials.load()
        authorizer = Authorizer(metadata, config.authorizer)
        authorizer.load()
        metadata.finish_replay()
        remote = RemoteTier(config.remote, logs) if config.remote.system_enable else None
        return cls(config, logs, notifier, GroupCommitFlusher(), groups, offsets, txns,
                   consumer_groups, credentials, authorizer, remote=remote)

    def remember_group(self, group_id: str) -> None:
        """After offsets were committed for ``group_id``: make it a known (Empty classic)
        group, so ListGroups shows it, unless it is a consumer group."""
        if group_id not in self.consumer_groups.groups:
            self.groups.get_or_create(group_id)

    def has_members(self, group_id: str) -> bool:
        """Whether a classic or a consumer (KIP-848) group of this id has members."""
        classic = self.groups.group(group_id)
        consumer = self.consumer_groups.groups.get(group_id)
        return bool(classic is not None and classic.members) or bool(
            consumer is not None and consumer.members)

    def expire_offsets(self, now_ms: int) -> None:
        """Delete committed offsets past ``offsets_retention_ms``; forget the empty groups
        this leaves with no offsets (ListGroups no longer shows them)."""
        for group_id in self.offsets.expire(now_ms, self.config.offsets_retention_ms,
                                            self.has_members):
            classic = self.groups.group(group_id)
            if classic is not None and not classic.members:
                self.groups.groups.pop(group_id, None)
            consumer = self.consumer_groups.groups.get(group_id)
            if consumer is not None and not consumer.members:
                self.consumer_groups.forget(group_id)

    @property
    def advertised_host(self) -> str:
        return self.config.advertised_host or self.config.host

    def topics_by_id(self) -> dict[uuid.UUID, str]:
        """Topic id -> name of every live topic (built per call: topics come and go)."""
        return {t.topic_id: t.name for t in self.logs.topics.values()}

    def topic_for_write(self, name: str, allow_auto_create: bool = True) -> Topic:
        """The topic, auto-created (``auto.create.topics.enable``) when missing and allowed.

        Raises ``UnknownTopicError`` or ``InvalidTopicError``. Reserved names
        (``internal_topics``) are never created.
        """
        topic = self.logs.topics.get(name)
        if topic is not None:
            return topic
        if not (allow_auto_create and self.config.auto_create_topics
                and internal_topics.may_auto_create(name)):
            raise UnknownTopicError(f"unknown topic {name!r}")
        log.info("auto-creating topic %s with %d partitions", name, self.config.num_partitions)
        return self.logs.create_topic(name, self.config.num_partitions)
