"""The registry's storage: the ``_schemas`` topic, replayed and written with fencing.

**Reading.** A consumer thread reads partition 0 of ``_schemas`` from the beginning,
``read_committed``, and folds every record into ``State`` under the store's lock. Start-up
blocks until the fold reaches the end of the topic, so a restarted or second process serves
the same ids as the first.

**Writing: one fenced writer at a time, on any broker.** Every write is a Kafka transaction
of one shared ``transactional.id`` (``<group>-<topic>``). A process that writes first calls
``init_transactions``, which bumps the producer epoch (fencing whichever process wrote
before) and completes that process's open transaction; then it reads ``_schemas`` to its
end, and only then decides (allocates the next id or version) on a state that includes
every committed write. A fenced process's next write fails at the broker with
PRODUCER_FENCED before anything of it is visible; it then starts over: re-init, catch up,
decide again. So two processes never hand out one id for two schemas, and a ``kill -9``
in the middle of a write leaves an open transaction that the next writer aborts: a
registration is acknowledged only after its transaction committed and the fold applied it
(so a read on this process right after sees it). This needs nothing but the transaction
APIs, which is why it holds on Apache Kafka as on headrace's broker. While two processes
take turns writing, each turn costs one ``init_transactions`` (a few ms); reads never wait.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.fencing import fenced_producer
from headrace.registry.errors import StoreError, StoreTimeout
from headrace.registry.state import Record, State
from headrace.settling import topic_configs

T = TypeVar("T")
log = logging.getLogger("headrace.registry")

DEFAULT_TOPIC = "_schemas"
_WRITE_ATTEMPTS = 8


class SchemaStore:
    """``_schemas`` on the cluster at ``bootstrap_servers``, folded into ``state``.

    ``client_config`` is extra librdkafka configuration for every client (security
    settings, for instance). ``timeout`` bounds start-up and each write, in seconds.
    """

    def __init__(self, bootstrap_servers: str, topic: str = DEFAULT_TOPIC,
                 group: str = "headrace-schema-registry",
                 client_config: dict[str, Any] | None = None, timeout: float = 30.0) -> None:
        self.topic = topic
        self.timeout = timeout
        self.transactional_id = f"{group}-{topic}"
        self.state = State()
        self._config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers,
                                        **(client_config or {})}
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._eof_offset = 0
        self._error: str | None = None
        self._stopping = threading.Event()
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._probe: Consumer | None = None  # end offsets (the reader's handle is busy)
        self._thread: threading.Thread | None = None

    # -- life cycle --------------------------------------------------------------------

    def start(self) -> None:
        """Create ``_schemas`` if missing (1 partition, compacted), check it, and replay it
        to its end. Blocks up to ``timeout``; raises ``StoreError`` on a wrong topic."""
        self._ensure_topic()
        reader = {**self._config, "group.id": f"headrace-registry-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True, "fetch.wait.max.ms": 20,
                  "auto.offset.reset": "earliest"}
        self._probe = Consumer(reader)
        self._consumer = Consumer(reader)
        self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        self._thread = threading.Thread(target=self._follow, name="registry-reader", daemon=True)
        self._thread.start()
        self._wait_applied(self._end_offset(), "replaying " + self.topic)

    def close(self) -> None:
        """Stop reading and writing. Idempotent."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for client in (self._consumer, self._probe):
            if client is not None:
                client.close()
        self._consumer = self._probe = None
        self._producer = None

    def _ensure_topic(self) -> None:
        admin = AdminClient({"log_level": 4, **self._config})
        wanted = NewTopic(self.topic, num_partitions=1, replication_factor=-1,
                          config={"cleanup.policy": "compact"})
        futures = admin.create_topics([wanted], request_timeout=self.timeout)
        try:
            futures[self.topic].result(self.timeout)
            log.info("created topic %s (1 partition, cleanup.policy=compact)", self.topic)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise StoreError(f"cannot create {self.topic}: {e.args[0].str()}") from e
        partitions = self._partitions(admin)
        if len(partitions) != 1:
            raise StoreError(f"{self.topic} has {len(partitions)} partitions; the registry "
                             f"needs exactly 1 (a total order of its records)")
        configs = self._topic_configs(admin)
        policy = configs["cleanup.policy"].value if "cleanup.policy" in configs else "delete"
        if "compact" not in policy or "delete" in policy:
            raise StoreError(f"{self.topic} has cleanup.policy={policy}; it must be 'compact' "
                             f"(deletion by retention would lose schemas)")

    def _topic_configs(self, admin: AdminClient) -> dict[str, Any]:
        """The topic's configs, waiting out a topic just created (``settling``)."""
        try:
            return topic_configs(admin, self.topic, self.timeout)
        except KafkaException as e:
            raise StoreError(f"cannot read the configuration of {self.topic}: "
                             f"{e.args[0].str()}") from e

    def _partitions(self, admin: AdminClient) -> dict[int, Any]:
        """The topic's partitions once its metadata has settled: a topic just created
        (here or by a concurrent registry) can be listed for a moment with no partitions
        or without leaders (Kafka's controller propagates it to the brokers
        asynchronously). Polls until every partition has a leader or ``timeout``."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                metadata = admin.list_topics(self.topic, timeout=self.timeout)
            except KafkaException as e:
                if time.monotonic() >= deadline:
                    raise StoreError(f"cannot describe {self.topic}: {e.args[0].str()}") from e
                time.sleep(0.1)
                continue
            topic = metadata.topics[self.topic]
            partitions = topic.partitions
            settled = (topic.error is None and partitions
                       and all(p.leader >= 0 for p in partitions.values()))
            if settled or time.monotonic() >= deadline:
                return dict(partitions)
            time.sleep(0.1)

    # -- reading -----------------------------------------------------------------------

    def _follow(self) -> None:
        assert self._consumer is not None
        while not self._stopping.is_set():
            try:
                # poll waits for the first record; consume(..., 0) takes what else is there
                # (consume with a timeout would wait for a full batch).
                first = self._consumer.poll(0.1)
                if first is None:
                    continue
                messages = [first, *self._consumer.consume(499, timeout=0)]
            except KafkaException as e:  # pragma: no cover - consumer closed under us
                self._fail(f"reading {self.topic}: {e}")
                return
            with self._cond:
                for m in messages:
                    err = m.error()
                    if err is None:
                        self.state.apply(m.offset() or 0, m.key(), m.value())
                    elif err.code() == KafkaError._PARTITION_EOF:
                        self._eof_offset = max(self._eof_offset, m.offset() or 0)
                    elif err.fatal() or not err.retriable():
                        log.warning("reading %s: %s", self.topic, err.str())
                self._cond.notify_all()

    def _fail(self, message: str) -> None:
        with self._cond:
            self._error = message
            self._cond.notify_all()

    def _applied(self) -> int:
        return max(self.state.next_offset, self._eof_offset)

    def _wait_applied(self, offset: int, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        with self._cond:
            while self._applied() < offset:
                if self._error is not None:
                    raise StoreError(self._error)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreTimeout(f"{what}: still at offset {self._applied()} of "
                                       f"{offset} after {self.timeout:g} s")
                self._cond.wait(min(left, 0.5))

    def _end_offset(self) -> int:
        assert self._probe is not None
        try:
            _low, high = self._probe.get_watermark_offsets(
                TopicPartition(self.topic, 0), timeout=self.timeout, cached=False)
        except KafkaException as e:
            raise StoreError(f"end offset of {self.topic}: {e.args[0].str()}") from e
        return int(high)

    @contextlib.contextmanager
    def reading(self) -> Iterator[State]:
        """The state, locked against the fold for the duration of the block."""
        with self._cond:
            yield self.state

    # -- writing -----------------------------------------------------------------------

    def transact(self, decide: Callable[[State], tuple[T, list[Record]]]) -> T:
        """Run ``decide`` on a state that holds every committed write, then write its
        records in one transaction; return its result once the records are applied.

        ``decide`` may raise (a registry error: nothing is written) and may run more than
        once (after this process was fenced), so it must not have side effects. Blocks up
        to ``timeout`` per attempt; raises ``StoreError``/``StoreTimeout``."""
        with self._write_lock:
            last: str = "no attempt"
            for _ in range(_WRITE_ATTEMPTS):
                producer = self._writer()
                with self._cond:
                    result, records = decide(self.state)
                if not records:
                    return result
                try:
                    end = self._write(producer, records)
                except KafkaException as e:
                    err = e.args[0]
                    last = err.str()
                    if err.txn_requires_abort():
                        with contextlib.suppress(KafkaException):
                            producer.abort_transaction(self.timeout)
                    else:
                        self._producer = None  # fenced or fatal: start over with a new epoch
                    log.info("write to %s retried: %s", self.topic, last)
                    continue
                self._wait_applied(end, "applying a write")
                return result
            raise StoreError(f"could not write to {self.topic}: {last}")

    def _writer(self) -> Producer:
        """The transactional producer, after init (which fences any other writer) and after
        the fold caught up with everything committed before it."""
        if self._producer is not None:
            return self._producer
        try:
            producer = fenced_producer(self._config, self.transactional_id, self.timeout)
        except KafkaException as e:
            raise StoreError(f"cannot become the writer of {self.topic}: "
                             f"{e.args[0].str()}") from e
        self._wait_applied(self._end_offset(), "catching up before a write")
        self._producer = producer
        return producer

    def _write(self, producer: Producer, records: list[Record]) -> int:
        offsets: list[int] = []
        failures: list[str] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failures.append(err.str())
            else:
                offsets.append(int(msg.offset()))

        producer.begin_transaction()
        for key, value in records:
            producer.produce(self.topic, key=key, value=value, partition=0, on_delivery=delivered)
        producer.commit_transaction(self.timeout)
        producer.poll(0)
        if failures or len(offsets) != len(records):
            raise StoreError(f"write to {self.topic} not acknowledged: {failures}")
        return max(offsets) + 1
