"""What the log cleaner keeps of each batch (Kafka's ``LogCleaner.cleanInto`` filter).

``BatchCleaner.clean_batch`` is called for every batch of a pass, in offset order; it
returns the batch to store (verbatim, rebuilt around its surviving records, or emptied
to a header) or None to drop it. The rules are in ``storage.cleaner``'s docstring.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from headrace.protocol.batch_codec import (
    DELETE_HORIZON_FLAG,
    batch_records,
    build_empty_batch,
    build_raw_batch,
    copy_record,
    delete_horizon,
)
from headrace.protocol.errors import ProtocolError
from headrace.protocol.records import TIMESTAMP_TYPE_MASK, BatchHeader, control_committed
from headrace.storage.offset_map import OffsetMap
from headrace.storage.producer_state import AbortedTxn


@dataclass
class CleanStats:
    """What one pass did (``aborted``: it gave up at a swap and changed nothing more)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_keys: int = 0
    segments_in: int = 0
    segments_out: int = 0
    tombstones_dropped: int = 0
    markers_dropped: int = 0
    aborted_records_dropped: int = 0
    unreadable_batches: int = 0
    end_offset: int = -1
    duration_s: float = 0.0
    aborted: bool = False
    removed_aborts: list[tuple[int, int]] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.duration_s if self.duration_s > 0 else 0.0


class TxnTracker:
    """Kafka's CleanedTransactionMetadata: which batches belong to aborted transactions,
    and whether a marker's transaction still has batches in the log, tracked in offset
    order over one pass."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for a in aborted:
            self._ranges.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
        for ranges in self._ranges.values():
            ranges.sort()
        self._committed_seen: set[int] = set()
        self._aborted_seen: set[int] = set()

    def is_aborted(self, h: BatchHeader) -> bool:
        ranges = self._ranges.get(h.producer_id)
        if not h.is_transactional or not ranges:
            return False
        i = bisect.bisect_right(ranges, (h.base_offset, 2**63)) - 1
        return i >= 0 and ranges[i][0] <= h.base_offset < ranges[i][1]

    def on_data(self, h: BatchHeader) -> bool:
        """True when the batch belongs to an aborted transaction (drop its records)."""
        if not h.is_transactional:
            return False
        if self.is_aborted(h):
            self._aborted_seen.add(h.producer_id)
            return True
        self._committed_seen.add(h.producer_id)
        return False

    def on_marker(self, h: BatchHeader, committed: bool) -> bool:
        """True when no batch of the marker's transaction was seen in this pass."""
        seen = self._committed_seen if committed else self._aborted_seen
        had = h.producer_id in seen
        seen.discard(h.producer_id)
        return not had


class BatchCleaner:
    """Decides, batch by batch in offset order, what of each batch survives."""

    def __init__(self, omap: OffsetMap, txns: TxnTracker,
                 producers: dict[int, tuple[int | None, int]], now_ms: int,
                 delete_retention_ms: int, stats: CleanStats) -> None:
        self.omap = omap
        self.txns = txns
        self.producers = producers
        self.now_ms = now_ms
        self.new_horizon = now_ms + delete_retention_ms
        self.stats = stats
        self.next_horizon = -1
        self.removed_aborts: list[tuple[int, int]] = []

    def _last_of_producer(self, h: BatchHeader) -> bool:
        info = self.producers.get(h.producer_id) if h.producer_id >= 0 else None
        if info is None:
            return False
        last_data, epoch = info
        if last_data is not None:
            return not h.is_control and h.last_offset == last_data
        return h.is_control and h.producer_epoch == epoch

    def _pending(self, horizon: int) -> None:
        if self.next_horizon < 0 or horizon < self.next_horizon:
            self.next_horizon = horizon

    def clean_batch(self, h: BatchHeader, raw: bytes) -> bytes | None:
        """The batch as it should be stored after this pass, or None to drop it."""
        if h.is_control:
            return self._clean_marker(h, raw)
        aborted = self.txns.on_data(h)
        self.stats.records_read += h.record_count
        try:
            buf, records = batch_records(raw, h)
        except ProtocolError:
            self.stats.unreadable_batches += 1
            return raw
        horizon = delete_horizon(h)
        tombstones_expire = horizon is not None and horizon <= self.now_ms
        kept = []
        tombstones = 0
        if aborted:
            self.stats.aborted_records_dropped += len(records)
        else:
            base = h.base_offset
            omap_get = self.omap.get
            for r in records:
                if r.key is None or base + r.offset_delta < omap_get(r.key):
                    continue
                if not r.has_value:
                    if tombstones_expire:
                        self.stats.tombstones_dropped += 1
                        continue
                    tombstones += 1
                kept.append(r)
        self.stats.records_kept += len(kept)
        if not kept:
            return build_empty_batch(h) if self._last_of_producer(h) else None
        if tombstones and horizon is None:
            horizon = self.new_horizon
        if tombstones:
            assert horizon is not None
            self._pending(horizon)
        if len(kept) == len(records) and horizon == delete_horizon(h):
            return raw
        attributes = h.attributes
        shift = 0
        if horizon is not None:
            attributes |= DELETE_HORIZON_FLAG
            shift = horizon - h.base_timestamp
        max_ts = h.max_timestamp
        if not h.attributes & TIMESTAMP_TYPE_MASK:
            max_ts = max(h.base_timestamp + r.timestamp_delta for r in kept)
        body = b"".join(copy_record(buf, r, shift) for r in kept)
        return build_raw_batch(h, body, len(kept), attributes=attributes,
                               base_timestamp=h.base_timestamp + shift, max_timestamp=max_ts)

    def _clean_marker(self, h: BatchHeader, raw: bytes) -> bytes | None:
        if not h.record_count:  # a marker emptied by an earlier pass
            return raw if self._last_of_producer(h) else None
        committed = control_committed(raw)
        if committed is None:
            return raw  # not a marker we know: keep it as it is
        discardable = self.txns.on_marker(h, committed)
        horizon = delete_horizon(h)
        if discardable and horizon is not None and horizon <= self.now_ms:
            self.stats.markers_dropped += 1
            if not committed:
                self.removed_aborts.append((h.producer_id, h.base_offset))
            return build_empty_batch(h) if self._last_of_producer(h) else None
        if discardable:
            if horizon is None:
                horizon = self.new_horizon
                buf, records = batch_records(raw, h)
                raw = build_raw_batch(
                    h, b"".join(copy_record(buf, r, horizon - h.base_timestamp) for r in records),
                    len(records), attributes=h.attributes | DELETE_HORIZON_FLAG,
                    base_timestamp=horizon, max_timestamp=h.max_timestamp)
            self._pending(horizon)
        return raw
