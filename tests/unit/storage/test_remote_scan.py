"""The tiered part of a partition rebuilt from the object store's listing alone
(``storage.remote_scan``), as a backfill's driver sees it: on the filesystem store."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from headrace.storage.remote_scan import ColdSpan, aborted_transactions, cold_spans
from headrace.storage.remote_store import FilesystemStorage, RemoteObjectMissingError

PREFIX = "t-0b7e0e34-4f8a-4d8e-9a3c-000000000001/0"


def put(store: FilesystemStorage, base: int, segment_id: str, size: int,
        aborted: bytes = b"") -> None:
    stem = f"{PREFIX}/{base:020d}-{segment_id}"
    store.put(stem + ".txnindex", io.BytesIO(aborted), len(aborted))
    store.put(stem + ".log", io.BytesIO(b"x" * size), size)


def test_spans_from_the_listing(tmp_path: Path) -> None:
    store = FilesystemStorage(tmp_path)
    put(store, 0, "a", 100)
    put(store, 40, "b", 120)
    put(store, 40, "c", 120)  # a copy retried after a crash: the same batches
    put(store, 90, "d", 80)
    put(store, 130, "e", 50)  # still being copied: above the latest tiered offset
    store.put(f"{PREFIX}/00000000000000000200-f.index", io.BytesIO(b""), 0)  # no .log yet
    store.put("other-topic/0/00000000000000000000-g.log", io.BytesIO(b"y"), 1)
    assert store.sizes(PREFIX + "/")[f"{PREFIX}/00000000000000000000-a.log"] == 100
    spans = cold_spans(store, PREFIX, 10, 130)
    assert [(s.segment.base_offset, s.segment.segment_id, s.start, s.end, s.segment.size)
            for s in spans] == [(0, "a", 10, 40, 100), (40, "b", 40, 90, 120),
                                (90, "d", 90, 130, 80)]
    assert [(s.start, s.end) for s in cold_spans(store, PREFIX, 50, 60)] == [(50, 60)]
    assert cold_spans(store, PREFIX, 60, 60) == []


def test_offsets_in_no_listed_segment(tmp_path: Path) -> None:
    store = FilesystemStorage(tmp_path)
    put(store, 40, "b", 120)
    with pytest.raises(RemoteObjectMissingError, match="holds offset 10"):
        cold_spans(store, PREFIX, 10, 60)


def test_aborted_transactions_of_a_segment(tmp_path: Path) -> None:
    store = FilesystemStorage(tmp_path)
    put(store, 0, "a", 10, struct.pack(">qqq", 7, 3, 9) + struct.pack(">qqq", 8, 12, 30))
    span = cold_spans(store, PREFIX, 0, 40)[0]
    assert isinstance(span, ColdSpan)
    assert aborted_transactions(store, span) == [(7, 3, 9), (8, 12, 30)]
