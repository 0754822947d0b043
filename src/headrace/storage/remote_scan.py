"""The tiered part of a partition as the object store alone shows it, for readers other
than the broker (Spark's executors reading a backfill straight from the store).

The broker keeps its remote log metadata in the partition directory
(``remote_metadata``); a reader elsewhere rebuilds what it needs from a listing of the
partition's objects plus two offsets any client gets through ListOffsets: the log start
offset (-2) and the latest tiered offset (-5). Why that is exact:

- a segment's ``.log`` object is written after all its other objects and an object is
  visible whole or not at all, so a listed ``.log`` holds the complete segment;
- every offset from the log start up to the latest tiered one is in a segment whose copy
  finished; the segment holding offset ``o`` is the listed one with the greatest base
  offset at or below ``o`` (the segments of a partition never overlap; two objects with
  one base offset, a copy retried after a crash, hold the same batches);
- a segment still being copied has a base offset above the latest tiered one and is left
  out; one deleted meanwhile by retention makes its read raise
  ``RemoteObjectMissingError``, and the caller asks the broker instead (which answers
  what any consumer would get for those offsets).

Every function blocks on the store and raises ``RemoteStorageError`` when it fails.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from headrace.storage.remote_metadata import COPY_FINISHED, RemoteSegment
from headrace.storage.remote_store import RemoteObjectMissingError, RemoteStorage

_ABORTED = struct.Struct(">qqq")


@dataclass(frozen=True)
class ColdSpan:
    """Offsets ``[start, end)`` of a partition that all lie in one remote segment."""

    prefix: str
    segment: RemoteSegment
    start: int
    end: int


def _segments(store: RemoteStorage, prefix: str, tiered_end: int) -> list[RemoteSegment]:
    """The partition's remote segments below ``tiered_end``, by base offset (one per
    base). A segment's ``end_offset`` is the next one's base (or ``tiered_end``): an upper
    bound, as offsets may be missing between segments (DeleteRecords past uncopied ones)."""
    found: dict[int, tuple[str, int]] = {}
    for key, size in store.sizes(prefix + "/").items():
        name = key[len(prefix) + 1:]
        if "/" in name or not name.endswith(".log"):
            continue
        base_text, _, segment_id = name[:-len(".log")].partition("-")
        if not base_text.isdigit() or not segment_id:
            continue
        base = int(base_text)
        if base < tiered_end and size > 0:
            found.setdefault(base, (segment_id, size))
    bases = sorted(found)
    return [RemoteSegment(found[b][0], b, nxt, found[b][1], -1, COPY_FINISHED)
            for b, nxt in zip(bases, [*bases[1:], tiered_end], strict=True)]


def cold_spans(store: RemoteStorage, prefix: str, start: int, end: int) -> list[ColdSpan]:
    """Spans covering offsets ``[start, end)`` of a partition, one per remote segment, in
    offset order. ``end`` is at most the latest tiered offset + 1 and ``start`` at least
    the log start offset, as the broker answered them. Raises
    ``RemoteObjectMissingError`` when no listed segment holds ``start`` (deleted since)."""
    if end <= start:
        return []
    segments = _segments(store, prefix, end)
    at = bisect.bisect_right([s.base_offset for s in segments], start) - 1
    if at < 0:
        raise RemoteObjectMissingError(f"no remote segment of {prefix} holds offset {start}")
    return [ColdSpan(prefix, seg, max(start, seg.base_offset), min(end, seg.end_offset))
            for seg in segments[at:] if seg.end_offset > start]


def aborted_transactions(store: RemoteStorage, span: ColdSpan) -> list[tuple[int, int, int]]:
    """``(producer id, first offset, last offset)`` of the aborted transactions overlapping
    the span's segment, from its ``.txnindex`` object."""
    data = store.get(span.segment.key(span.prefix, ".txnindex"))
    return [_ABORTED.unpack_from(data, i) for i in range(0, len(data) - _ABORTED.size + 1,
                                                         _ABORTED.size)]
