"""The PostgreSQL connector: a consistent snapshot, then the WAL stream, into the log.

Order of a run (``Connector.run``):

1. Check the server (wal_level, the REPLICATION attribute), the tables (present, keyed),
   and make the publication hold exactly the captured tables.
2. Become the one writer: a transactional producer (``headrace-cdc-<slot>``) whose
   ``init_transactions`` fences any earlier connector process of the slot and aborts what
   it left open. Read the connector's offsets (compacted topic, read_committed): the end
   LSN of the last source transaction written, and whether the snapshot is complete.
3. Snapshot (``initial``: when none completed; ``always``; ``never``: skip): create the
   slot with ``EXPORT_SNAPSHOT``, read every table at that snapshot, and write all rows
   (``op: "r"``) plus "snapshot done at LSN L" in **one** Kafka transaction; streaming
   then starts at L, the slot's consistent point, so every row version is delivered once
   across the boundary. A crash during the snapshot aborts that transaction and the next
   run snapshots afresh on a new slot.
4. Stream: source transactions' changes and the end LSN of the last of them go out in one
   Kafka transaction (read_committed consumers see a database transaction atomically; a
   burst of small ones shares a Kafka transaction, never splits one: what is already
   waiting in the replication stream, up to 20,000 records or 200 ms); only
   after that commit is acknowledged does the connector confirm the LSN to PostgreSQL
   (``send_feedback(flush_lsn)``), so WAL is released only once it is in the log. After a
   crash PostgreSQL resends from the confirmed LSN; transactions that the offsets show as
   written are skipped, so nothing is lost and nothing doubles for read_committed readers.
5. Heartbeats: every ``heartbeat_s`` without traffic the connector emits a logical message
   into the WAL and confirms its LSN when it comes back, so the slot advances (and WAL is
   released) while the captured tables are idle and other tables churn.

A slot that is gone while offsets exist, or is invalidated (``wal_status = lost``), means
changes were lost: ``SlotLostError``, never a silent gap; ``--snapshot always`` is the way
out. Whole source transactions are held in memory until their commit.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.extras
from confluent_kafka import KafkaError, KafkaException, Producer

from headrace.cdc import kafka_log, pgoutput, postgres
from headrace.cdc.envelope import (
    JSON,
    Encoder,
    Source,
    Table,
    records,
    snapshot_markers,
    topic_of,
)
from headrace.cdc.errors import CdcConfigError, CdcError, SlotLostError, redact
from headrace.cdc.kafka_log import Record
from headrace.cdc.values import DECIMAL_MODES, TIME_MODES, TypeCatalog

log = logging.getLogger("headrace.cdc")
SNAPSHOT_MODES = ("initial", "never", "always", "initial_only")
READY_PREFIX = "headrace cdc streaming "
_MAX_PENDING = 20_000
"""Records of committed source transactions gathered into one Kafka transaction at most."""
_MAX_PENDING_S = 0.2
"""How long committed source transactions may wait for company while the WAL keeps coming."""


@dataclass(frozen=True)
class CdcConfig:
    dsn: str
    tables: tuple[str, ...]
    bootstrap_servers: str
    topic_prefix: str = "headrace"
    snapshot: str = "initial"
    slot: str = "headrace"
    publication: str = "headrace"
    heartbeat_s: float = 10.0
    decimal_mode: str = "precise"
    offsets_topic: str = "__headrace_cdc_offsets"
    client_config: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 30.0
    schema_registry_url: str = ""
    """Set: keys and values are Avro through this registry (``avro.py``), else JSON."""
    time_precision_mode: str = "adaptive"
    """Debezium's ``time.precision.mode``: adaptive or connect (``decimal_mode`` is its
    ``decimal.handling.mode``)."""


@dataclass
class Offsets:
    end_lsn: int = 0
    snapshot_done: bool = False
    seen: bool = False
    events: dict[str, int] = field(default_factory=dict)
    """Change events written so far per topic (snapshot rows included, tombstones not)."""


class Connector:
    """One capture of ``config.tables``. ``run`` blocks until ``stop`` is set."""

    def __init__(self, config: CdcConfig) -> None:
        if config.snapshot not in SNAPSHOT_MODES:
            raise CdcConfigError(f"--snapshot must be one of {', '.join(SNAPSHOT_MODES)}")
        if config.decimal_mode not in DECIMAL_MODES:
            raise CdcConfigError("--decimal-handling-mode must be one of "
                                 f"{', '.join(DECIMAL_MODES)}")
        if config.time_precision_mode not in TIME_MODES:
            raise CdcConfigError(f"--time-precision-mode must be one of {', '.join(TIME_MODES)}")
        self.cfg = config
        self.kafka = kafka_log.kafka_config(config.bootstrap_servers, config.client_config)
        self.tables: dict[int, Table] = {}
        self.types: TypeCatalog = {}
        self.offsets = Offsets()
        self.producer: Producer | None = None
        self.db_name = ""
        self.encoder: Encoder = JSON
        if config.schema_registry_url:
            from headrace.cdc.avro import AvroEncoder

            self.encoder = AvroEncoder(config.schema_registry_url, config.topic_prefix,
                                       config.decimal_mode, config.time_precision_mode)

    # -- Kafka side ----------------------------------------------------------------------

    def _ensure_topics(self, tables: list[Table]) -> None:
        kafka_log.ensure_topics(self.kafka, [topic_of(self.cfg.topic_prefix, t) for t in tables],
                                self.cfg.offsets_topic, self.cfg.timeout_s)

    def _unreachable(self) -> CdcError:
        return kafka_log.unreachable(self.kafka, self.cfg.timeout_s)

    def _read_offsets(self) -> Offsets:
        doc = kafka_log.last_offsets_record(self.kafka, self.cfg.offsets_topic,
                                            self.cfg.slot.encode(), self.cfg.timeout_s)
        if doc is None:
            return Offsets()
        return Offsets(int(doc["end_lsn"]), bool(doc["snapshot_done"]), True,
                       {str(k): int(v) for k, v in (doc.get("events") or {}).items()})

    def _write(self, batch: list[Record], end_lsn: int, snapshot_done: bool = True) -> None:
        """``batch`` and the offsets record saying the log holds everything up to
        ``end_lsn``, in one Kafka transaction. Blocks until committed; raises ``CdcError``.
        ``self.offsets`` moves only after the commit."""
        assert self.producer is not None
        events = kafka_log.counted(self.offsets.events, batch)
        kafka_log.commit_batch(self.producer, batch, self.cfg.offsets_topic,
                               self.cfg.slot.encode(),
                               {"end_lsn": end_lsn, "lsn": pgoutput.lsn_text(end_lsn),
                                "snapshot_done": snapshot_done, "events": events,
                                "ts_ms": int(time.time() * 1000)}, self.cfg.timeout_s)
        self.offsets = Offsets(end_lsn, snapshot_done, True, events)

    # -- the run ---------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None,
            on_ready: Callable[[str], None] | None = None) -> None:
        """Snapshot (as configured) and stream until ``stop``. Blocks."""
        stop = stop or threading.Event()
        db = postgres.connect(self.cfg.dsn, self.cfg.timeout_s)
        try:
            self.db_name = postgres.check_server(db)
            self.types = postgres.type_catalog(db)
            tables = [postgres.table_info(db, q, self.cfg.decimal_mode,
                                          self.cfg.time_precision_mode, self.types)
                      for q in self.cfg.tables]
            postgres.ensure_publication(db, self.cfg.publication, tables)
            self._ensure_topics(tables)
            self.producer = Producer({**self.kafka, "transactional.id":
                                      f"headrace-cdc-{self.cfg.slot}", "acks": "all",
                                      "enable.idempotence": True, "linger.ms": 5})
            try:
                self.producer.init_transactions(self.cfg.timeout_s)
            except KafkaException as e:
                if e.args[0].code() == KafkaError._TIMED_OUT:
                    raise self._unreachable() from e
                raise CdcError(f"cannot start the transactional producer: "
                               f"{e.args[0].str()}") from e
            self.offsets = self._read_offsets()
            start = self._prepare_slot(db, tables)
            if start is None:
                return
            self._stream(db, start, stop, on_ready)
        except psycopg2.Error as e:  # the server went away, a backend was terminated...
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CdcError(f"PostgreSQL: {redact(message)}") from e
        finally:
            db.close()

    def _replication(self) -> Any:
        try:
            conn = psycopg2.connect(self.cfg.dsn,
                                    connection_factory=psycopg2.extras.LogicalReplicationConnection)
        except psycopg2.Error as e:
            raise CdcConfigError(f"no replication connection: {redact(str(e).strip())}") from e
        return conn

    def _prepare_slot(self, db: Any, tables: list[Table]) -> int | None:
        """Create or check the slot, snapshot if needed; the LSN to stream from (None: done)."""
        slot = postgres.slot_state(db, self.cfg.slot)
        if slot.exists and slot.wal_status == "lost":
            raise SlotLostError(f"replication slot {self.cfg.slot} was invalidated (its WAL "
                                "was removed): changes are lost; re-snapshot with "
                                "--snapshot always")
        wants_snapshot = self.cfg.snapshot == "always" or (
            self.cfg.snapshot in ("initial", "initial_only") and not self.offsets.snapshot_done)
        if self.offsets.seen and not slot.exists and not wants_snapshot:
            raise SlotLostError(f"replication slot {self.cfg.slot} is gone but the offsets say "
                                f"the log holds changes up to "
                                f"{pgoutput.lsn_text(self.offsets.end_lsn)}: changes after "
                                "that are lost; re-snapshot with --snapshot always")
        if not wants_snapshot:
            if not slot.exists:
                repl = self._replication()
                with repl.cursor() as cur:
                    cur.execute(f'CREATE_REPLICATION_SLOT "{self.cfg.slot}" LOGICAL pgoutput '
                                "NOEXPORT_SNAPSHOT")
                    consistent = pgoutput.parse_lsn(cur.fetchone()[1])
                repl.close()
                return max(consistent, self.offsets.end_lsn)
            return self.offsets.end_lsn
        if slot.exists:
            postgres.drop_slot(db, self.cfg.slot)
        repl = self._replication()
        try:
            with repl.cursor() as cur:
                cur.execute(f'CREATE_REPLICATION_SLOT "{self.cfg.slot}" LOGICAL pgoutput '
                            "EXPORT_SNAPSHOT")
                _name, consistent_text, snapshot_name, _plugin = cur.fetchone()
            consistent = pgoutput.parse_lsn(consistent_text)
            self._snapshot(snapshot_name, tables, consistent)
        finally:
            repl.close()  # the exported snapshot lives until here
        if self.cfg.snapshot == "initial_only":
            return None
        return consistent

    def _snapshot(self, snapshot_name: str, tables: list[Table], lsn: int) -> None:
        now = time.time_ns() // 1000
        batch: list[Record] = []
        read = postgres.read_snapshot(self.cfg.dsn, snapshot_name, tables)
        tx_id = next(read)
        assert isinstance(tx_id, int)
        rows = [r for r in read if not isinstance(r, int)]
        counts = [sum(1 for t, _ in rows if t is table) for table in tables]
        marks = [m for per_table in snapshot_markers(counts) for m in per_table]
        for (table, values), flag in zip(rows, marks, strict=True):
            source = Source(self.cfg.topic_prefix, self.db_name, lsn, tx_id, now, flag)
            for key, value in records(table, "r", None, table.row(values, snapshot=True),
                                      source, self.encoder):
                batch.append((topic_of(self.cfg.topic_prefix, table), key, value))
        self.offsets.events = {}  # a new snapshot starts the counts afresh
        self._write(batch, lsn)
        log.info("snapshot of %d rows written; streaming from %s", len(rows),
                 pgoutput.lsn_text(lsn))

    def _stream(self, db: Any, start_lsn: int, stop: threading.Event,
                on_ready: Callable[[str], None] | None) -> None:
        repl = self._replication()
        cur = repl.cursor()
        cur.start_replication(slot_name=self.cfg.slot, decode=False, start_lsn=start_lsn,
                              options={"proto_version": "1",
                                       "publication_names": self.cfg.publication,
                                       "messages": "true"})
        # What the log holds is safe to confirm at once (a crash may have come between
        # a commit and its feedback); the server answers with a keepalive carrying its
        # decoded WAL end, which ``confirm_idle`` below confirms when nothing is pending.
        confirmed = max(start_lsn, self.offsets.end_lsn)
        cur.send_feedback(flush_lsn=confirmed, force=True)
        if on_ready is not None:
            on_ready(pgoutput.lsn_text(start_lsn))
        txn: list[Record] | None = None
        pending: list[Record] = []  # committed source transactions not yet in the log
        pending_end, pending_since = 0, 0.0
        # Debezium's source.sequence starts with the end of the last transaction before
        # (or a heartbeat's position; null when nothing came before)
        xid, commit_ts = 0, 0
        last_commit: int | None = None
        last_traffic = time.monotonic()

        def confirm_idle() -> None:
            """All the server has decoded has reached us (its keepalive's ``wal_end``)
            and nothing is open or pending: every captured commit before that point is
            in the log, so the slot may move there without waiting for a heartbeat."""
            nonlocal confirmed
            if txn is None and not pending and cur.wal_end > confirmed:
                confirmed = cur.wal_end
                cur.send_feedback(flush_lsn=confirmed, force=True)  # not at the next interval

        def flush() -> None:
            nonlocal pending
            if pending:
                self._write(pending, pending_end)
                pending = []
            # forced: psycopg2 would otherwise hold it until its 10 s status interval
            cur.send_feedback(flush_lsn=max(pending_end, self.offsets.end_lsn), force=True)

        try:
            while not stop.is_set():
                msg = cur.read_message()
                if msg is None:
                    if pending or pending_end > self.offsets.end_lsn:
                        flush()
                    confirm_idle()
                    if time.monotonic() - last_traffic >= self.cfg.heartbeat_s:
                        postgres.emit_heartbeat(db)
                        last_traffic = time.monotonic()
                    select.select([cur], [], [], 0.5)
                    continue
                last_traffic = time.monotonic()
                event = pgoutput.decode(msg.payload)
                if isinstance(event, pgoutput.Relation):
                    self.tables[event.oid] = self._relation(db, event)
                elif isinstance(event, pgoutput.Begin):
                    txn, xid, commit_ts = [], event.xid, event.commit_ts_us
                elif isinstance(event, pgoutput.Commit):
                    if event.commit_lsn >= self.offsets.end_lsn and txn:
                        if not pending:
                            pending_since = time.monotonic()
                        pending.extend(txn)
                    pending_end = max(pending_end, event.end_lsn)
                    last_commit = event.end_lsn
                    txn = None
                    if len(pending) >= _MAX_PENDING or (
                            pending and time.monotonic() - pending_since >= _MAX_PENDING_S):
                        flush()
                elif isinstance(event, pgoutput.LogicalMessage):
                    if not event.transactional:
                        last_commit = msg.data_start
                    if not event.transactional and txn is None and not pending:
                        cur.send_feedback(flush_lsn=event.lsn, force=True)
                elif isinstance(event, pgoutput.Insert | pgoutput.Update | pgoutput.Delete):
                    if txn is None:
                        raise CdcError("a change outside a transaction")
                    source = Source(self.cfg.topic_prefix, self.db_name, msg.data_start, xid,
                                    commit_ts, last_commit_lsn=last_commit)
                    txn.extend(self._change(event, source))
        finally:
            repl.close()

    def _relation(self, db: Any, rel: pgoutput.Relation) -> Table:
        """A Relation message's table, with what only the catalog knows (primary key, NOT
        NULL, defaults, types created since the start)."""
        self.types = postgres.type_catalog(db)
        found = postgres.catalog_columns(db, rel.namespace, rel.name)
        facts = found[3] if found is not None else {}
        return Table.from_relation(rel, self.cfg.decimal_mode, self.cfg.time_precision_mode,
                                   self.types, facts)

    def _change(self, event: pgoutput.Insert | pgoutput.Update | pgoutput.Delete,
                source: Source) -> list[Record]:
        table = self.tables[event.relation_oid]
        topic = topic_of(self.cfg.topic_prefix, table)
        out: list[tuple[bytes, bytes | None]] = []
        if isinstance(event, pgoutput.Insert):
            out = records(table, "c", None, table.row(event.new), source, self.encoder)
        elif isinstance(event, pgoutput.Update):
            new = event.new
            if event.old is not None and table.full_identity:
                # FULL identity logs the whole old row: it fills unchanged TOAST values in
                new = tuple(o if n is pgoutput.UNCHANGED_TOAST else n
                            for n, o in zip(event.new, event.old, strict=True))
            after = table.row(new)
            before = None
            if event.old is not None:
                before = table.row(event.old) if table.full_identity else \
                    table.old_row(event.old)
            # PostgreSQL logs the old row (but for FULL) only when the replica identity's
            # columns changed: Debezium then sends a delete and a create, as when the
            # primary key changes under FULL.
            if before is not None and (not table.full_identity or any(
                    before.get(k) != after.get(k) for k in table.key)):
                out = records(table, "d", before, None, source, self.encoder)
                out += records(table, "c", None, after, source, self.encoder)
                return [(topic, k, v) for k, v in out]
            out = records(table, "u", before, after, source, self.encoder)
        else:
            before = table.row(event.old) if table.full_identity else \
                table.old_row(event.old)
            out = records(table, "d", before, None, source, self.encoder)
        return [(topic, k, v) for k, v in out]
