"""The MySQL/MariaDB connector: a consistent snapshot, then the binlog, into the log.

The same exactly-once rule as the PostgreSQL connector (``connector``):

1. Become the one writer: a transactional producer (``headrace-cdc-<name>``) whose
   ``init_transactions`` fences any earlier process of the same name and aborts what it
   left open; read the last offsets record (``<name>`` in the compacted offsets topic,
   read_committed): the binlog file and position after the last source transaction in the
   log, the GTID position there (MariaDB), and whether the snapshot is complete.
2. Snapshot (``initial`` when none completed, ``always``, ``never``, ``initial_only``):
   a consistent snapshot (``mysql.snapshot``: lock-free on MariaDB, a momentary global
   read lock on MySQL) and its binlog position; all rows (``op: "r"``) and "snapshot done
   at that position" go out in **one** Kafka transaction.
3. Stream from the stored position: each source transaction's changes (from its GTID or
   BEGIN event to its XID or COMMIT) and the position after its commit event go out in one
   Kafka transaction (a burst of small ones may share one, never split one). After a crash the connector resumes where the log's offsets say:
   on MariaDB at their GTID position (one ``domain-server-sequence`` per replication
   domain: it survives binlog file renaming and a switch to another server of the same
   replication topology), on MySQL at their binlog file and position. So for read_committed
   readers nothing is lost and nothing doubles. Whole source transactions are held in
   memory until their commit.

Column names, keys and types of streamed rows come from each TABLE_MAP event's metadata
(``binlog_row_metadata=FULL``): an ``ALTER TABLE`` shows in the very next change events,
with no schema history to keep. Binlog files the log still needs must not be purged
(``binlog_expire_logs_seconds``); a position that is gone is a ``SlotLostError``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Producer

from headrace.cdc import kafka_log, mysql
from headrace.cdc.connector import SNAPSHOT_MODES
from headrace.cdc.errors import CdcConfigError, CdcError
from headrace.cdc.kafka_log import Record
from headrace.cdc.mysql import Dsn, Position, Table
from headrace.cdc.mysql_avro import MySqlAvroEncoder
from headrace.cdc.mysql_envelope import Encode, Source, records, row, topic_of
from headrace.cdc.mysql_stream import Capture, stream
from headrace.cdc.mysql_values import DEFAULT_MODES, Modes

log = logging.getLogger("headrace.cdc")


@dataclass(frozen=True)
class MySqlConfig:
    dsn: str
    tables: tuple[str, ...]
    """``database.table`` names."""
    bootstrap_servers: str
    topic_prefix: str = "headrace"
    snapshot: str = "initial"
    name: str = "headrace-mysql"
    """The connector's identity: its offsets key and transactional id."""
    server_id: int = 5401
    """The replica server id the binlog is read as (unique among the server's replicas)."""
    heartbeat_s: float = 1.0
    """While no captured table changes, the position is written at most this often."""
    offsets_topic: str = "__headrace_cdc_offsets"
    client_config: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 30.0
    modes: Modes = DEFAULT_MODES
    """Debezium's decimal.handling.mode and time.precision.mode."""
    schema_registry_url: str = ""
    """Keys and values as Avro through this registry (Confluent's wire format); JSON
    when empty."""


@dataclass
class Offsets:
    position: Position | None = None
    gtid: str | None = None
    snapshot_done: bool = False
    events: dict[str, int] = field(default_factory=dict)


class MySqlConnector:
    """One capture of ``config.tables``. ``run`` blocks until ``stop`` is set."""

    def __init__(self, config: MySqlConfig) -> None:
        if config.snapshot not in SNAPSHOT_MODES:
            raise CdcConfigError(f"--snapshot must be one of {', '.join(SNAPSHOT_MODES)}")
        self.cfg = config
        self.dsn = Dsn.parse(config.dsn)
        self.kafka = kafka_log.kafka_config(config.bootstrap_servers, config.client_config)
        self.offsets = Offsets()
        self.producer: Producer | None = None
        self.connector_name = "mysql"
        self.server_id = 0
        self.encode: Encode | None = None
        self.wanted: set[tuple[str, str]] = set()
        for qualified in config.tables:
            db, _, table = qualified.rpartition(".")
            self.wanted.add((db or self.dsn.database, table))

    # -- Kafka side ----------------------------------------------------------------------

    def _unreachable(self) -> CdcError:
        return kafka_log.unreachable(self.kafka, self.cfg.timeout_s)

    def _ensure_topics(self, tables: list[Table]) -> None:
        kafka_log.ensure_topics(self.kafka, [topic_of(self.cfg.topic_prefix, t) for t in tables],
                                self.cfg.offsets_topic, self.cfg.timeout_s)

    def _read_offsets(self) -> Offsets:
        doc = kafka_log.last_offsets_record(self.kafka, self.cfg.offsets_topic,
                                            self.cfg.name.encode(), self.cfg.timeout_s)
        if doc is None or "file" not in doc:
            return Offsets()
        return Offsets(Position(str(doc["file"]), int(doc["pos"])), doc.get("gtid"),
                       bool(doc["snapshot_done"]),
                       {str(k): int(v) for k, v in (doc.get("events") or {}).items()})

    def _write(self, batch: list[Record], position: Position, gtid: str | None,
               snapshot_done: bool = True) -> None:
        """``batch`` and the offsets record saying the log holds everything before
        ``position``, in one Kafka transaction. Blocks until committed; raises ``CdcError``.
        ``self.offsets`` moves only after the commit."""
        assert self.producer is not None
        events = kafka_log.counted(self.offsets.events, batch)
        kafka_log.commit_batch(self.producer, batch, self.cfg.offsets_topic,
                               self.cfg.name.encode(),
                               {"file": position.file, "pos": position.pos, "gtid": gtid,
                                "snapshot_done": snapshot_done, "events": events,
                                "ts_ms": int(time.time() * 1000)}, self.cfg.timeout_s)
        self.offsets = Offsets(position, gtid, snapshot_done, events)

    # -- the run ---------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None,
            on_ready: Callable[[str], None] | None = None) -> None:
        """Snapshot (as configured) and stream until ``stop``. Blocks."""
        stop = stop or threading.Event()
        db = mysql.connect(self.dsn)
        try:
            mariadb = mysql.check_server(db)
            self.connector_name = "mariadb" if mariadb else "mysql"
            self.server_id = mysql.server_id(db)
            if self.cfg.schema_registry_url:
                self.encode = MySqlAvroEncoder(self.cfg.schema_registry_url,
                                               self.cfg.topic_prefix, self.connector_name,
                                               self.cfg.modes).encode
            tables = [mysql.table_info(db, d, t) for d, t in sorted(self.wanted)]
        finally:
            db.close()
        self._ensure_topics(tables)
        self.producer = Producer({**self.kafka, "transactional.id":
                                  f"headrace-cdc-{self.cfg.name}", "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5})
        try:
            self.producer.init_transactions(self.cfg.timeout_s)
        except KafkaException as e:
            raise CdcError(f"cannot start a Kafka transaction: {e.args[0].str()}") from e
        self.offsets = self._read_offsets()
        wants_snapshot = self.cfg.snapshot == "always" or (
            self.cfg.snapshot in ("initial", "initial_only") and not self.offsets.snapshot_done)
        if wants_snapshot:
            self._snapshot(tables, mariadb)
            if self.cfg.snapshot == "initial_only":
                return
        elif self.offsets.position is None:
            db = mysql.connect(self.dsn)
            try:
                here = mysql.current_position(db)
                self._write([], here, mysql.gtid_at(db, here) if mariadb else None,
                            self.offsets.snapshot_done)
            finally:
                db.close()
        assert self.offsets.position is not None
        capture = Capture(self.dsn.settings(), self.cfg.server_id, frozenset(self.wanted),
                          self.cfg.topic_prefix, self.connector_name, mariadb,
                          self.cfg.heartbeat_s, self.cfg.modes, self.encode)
        stream(capture, self.offsets.position, self.offsets.gtid, self._write, stop, on_ready)

    def _snapshot(self, tables: list[Table], mariadb: bool) -> None:
        position, gtid, rows = mysql.snapshot(self.dsn, tables, mariadb)
        now_ms = int(time.time() * 1000)
        read = list(rows)
        batch: list[Record] = []
        for i, (table, values) in enumerate(read):
            first_of_table = i == 0 or read[i - 1][0] is not table
            last_of_table = i == len(read) - 1 or read[i + 1][0] is not table
            flag = ("first" if i == 0 else "last" if i == len(read) - 1 else
                    "first_in_data_collection" if first_of_table else
                    "last_in_data_collection" if last_of_table else "true")
            source = Source(self.cfg.topic_prefix, now_ms, 0, position.file, position.pos,
                            flag, connector=self.connector_name)
            after = row(table, values, modes=self.cfg.modes)
            batch += records(self.cfg.topic_prefix, table, "r", None, after, source,
                             self.encode)
        self.offsets.events = {}  # a new snapshot starts the counts afresh
        self._write(batch, position, gtid)
        log.info("snapshot of %d rows written; streaming from %s:%d", len(read),
                 position.file, position.pos)
