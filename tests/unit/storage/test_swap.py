"""Recovery of interrupted swaps (``storage.swap``), file by file."""

from __future__ import annotations

from pathlib import Path

from headrace.storage.segment import segment_paths
from headrace.storage.swap import (
    CLEANED,
    commit_manifest,
    complete_interrupted_swaps,
    manifest_path,
    write_manifest_tmp,
)


def make(directory: Path, base: int, content: bytes, suffix: str = "") -> None:
    log, index, timeindex = segment_paths(directory, base, suffix)
    log.write_bytes(content)
    index.write_bytes(b"")
    timeindex.write_bytes(b"")


def log_content(directory: Path, base: int) -> bytes | None:
    path = segment_paths(directory, base)[0]
    return path.read_bytes() if path.exists() else None


def test_uncommitted_clean_is_discarded(tmp_path: Path) -> None:
    make(tmp_path, 0, b"old0")
    make(tmp_path, 5, b"old5")
    make(tmp_path, 0, b"new", CLEANED)
    write_manifest_tmp(tmp_path, 0, [0, 5])
    assert complete_interrupted_swaps(tmp_path) == 0
    assert (log_content(tmp_path, 0), log_content(tmp_path, 5)) == (b"old0", b"old5")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for b in (0, 5) for p in segment_paths(tmp_path, b))


def test_committed_swap_is_finished(tmp_path: Path) -> None:
    make(tmp_path, 0, b"old0")
    make(tmp_path, 5, b"old5")
    make(tmp_path, 9, b"live9")
    make(tmp_path, 0, b"new", CLEANED)
    write_manifest_tmp(tmp_path, 0, [0, 5])
    commit_manifest(tmp_path, 0)
    assert complete_interrupted_swaps(tmp_path) == 1
    assert (log_content(tmp_path, 0), log_content(tmp_path, 5), log_content(tmp_path, 9)) == (
        b"new", None, b"live9")
    assert not manifest_path(tmp_path, 0).exists()
    assert not list(tmp_path.glob(f"*{CLEANED}"))


def test_half_finished_swap_is_finished(tmp_path: Path) -> None:
    # Crash after the cleaned log was renamed into place, before segment 5 was deleted.
    make(tmp_path, 0, b"new")
    make(tmp_path, 5, b"old5")
    write_manifest_tmp(tmp_path, 0, [0, 5])
    commit_manifest(tmp_path, 0)
    assert complete_interrupted_swaps(tmp_path) == 1
    assert (log_content(tmp_path, 0), log_content(tmp_path, 5)) == (b"new", None)
    assert complete_interrupted_swaps(tmp_path) == 0  # idempotent


def test_unreadable_manifest_is_dropped(tmp_path: Path) -> None:
    make(tmp_path, 0, b"old0")
    manifest_path(tmp_path, 0).write_text("{not json")
    assert complete_interrupted_swaps(tmp_path) == 0
    assert log_content(tmp_path, 0) == b"old0"
    assert not manifest_path(tmp_path, 0).exists()
