"""Crash-safe replacement of log segments by their cleaned version.

Kafka's cleaner writes ``.cleaned`` files, renames them to ``.swap`` and then into place;
here the ``.swap`` step is an explicit manifest naming the segments replaced, so recovery
never has to infer them from offsets. For a group of segments whose first base is ``B``:

1. the cleaner writes ``B.log.cleaned``, ``B.index.cleaned``, ``B.timeindex.cleaned``
   and fsyncs them, then writes and fsyncs ``B.swap.tmp`` (JSON: the replaced bases);
2. **commit**: ``B.swap.tmp`` is renamed to ``B.swap``;
3. the replaced segments other than ``B`` are deleted and the cleaned files renamed over
   ``B``'s (indexes first, the log last; each rename atomic);
4. the directory is fsynced and ``B.swap`` deleted.

``complete_interrupted_swaps`` runs before a partition's segments are opened: a ``B.swap``
manifest means the swap was committed, so steps 3-4 are redone (they are idempotent);
without one, ``.cleaned`` and ``.swap.tmp`` files are leftovers of an uncommitted clean and
are deleted. A crash at any point therefore leaves either all the old segments of the
group or the cleaned one: no record is lost and no superseded value comes back.
Power-loss safety also relies on the file system keeping renames and unlinks of one
directory in order (ext4, xfs); ``kill -9`` safety does not.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from headrace.storage.segment import segment_name, segment_paths

CLEANED = ".cleaned"
_MANIFEST = ".swap"
_MANIFEST_TMP = ".swap.tmp"


def fsync_dir(path: Path) -> None:
    """fsync a directory, making the creation, deletion or rename of its entries durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def manifest_path(directory: Path, base_offset: int, tmp: bool = False) -> Path:
    return directory / f"{segment_name(base_offset)}{_MANIFEST_TMP if tmp else _MANIFEST}"


def write_manifest_tmp(directory: Path, base_offset: int, replaced: list[int]) -> Path:
    """Step 1's manifest, written and fsynced but not committed. Blocking."""
    tmp = manifest_path(directory, base_offset, tmp=True)
    with open(tmp, "w") as f:
        f.write(json.dumps({"base_offset": base_offset, "replaced": replaced}))
        f.flush()
        os.fsync(f.fileno())
    return tmp


def commit_manifest(directory: Path, base_offset: int) -> None:
    """Step 2: from here on the swap happens, even across a crash."""
    os.replace(manifest_path(directory, base_offset, tmp=True), manifest_path(directory, base_offset))


def finish_swap(directory: Path, base_offset: int, replaced: list[int]) -> None:
    """Step 3: idempotent; the caller has closed the replaced segments' files."""
    for base in replaced:
        if base != base_offset:
            for path in segment_paths(directory, base):
                path.unlink(missing_ok=True)
    cleaned = segment_paths(directory, base_offset, CLEANED)
    final = segment_paths(directory, base_offset)
    for i in (1, 2, 0):  # indexes first: the log's rename completes the swap
        if cleaned[i].exists():
            os.replace(cleaned[i], final[i])


def discard_cleaned(directory: Path, base_offset: int) -> None:
    """Delete an uncommitted clean's files (never the live segment's)."""
    for path in segment_paths(directory, base_offset, CLEANED):
        path.unlink(missing_ok=True)
    manifest_path(directory, base_offset, tmp=True).unlink(missing_ok=True)


def remove_manifest(directory: Path, base_offset: int) -> None:
    """Step 4. Blocking (two directory fsyncs)."""
    fsync_dir(directory)
    manifest_path(directory, base_offset).unlink(missing_ok=True)
    fsync_dir(directory)


def complete_interrupted_swaps(directory: Path) -> int:
    """Finish committed swaps and drop uncommitted cleans (see the module docstring);
    returns how many swaps were completed. Call before opening the segments."""
    if not directory.is_dir():
        return 0
    completed = 0
    changed = False
    for manifest in sorted(directory.glob(f"*{_MANIFEST}")):
        try:
            data = json.loads(manifest.read_text())
            base = int(data["base_offset"])
            replaced = [int(b) for b in data["replaced"]]
        except (OSError, ValueError, KeyError, TypeError):
            # Written whole before its atomic rename, so this cannot be ours half-done.
            manifest.unlink(missing_ok=True)
            changed = True
            continue
        finish_swap(directory, base, replaced)
        manifest.unlink(missing_ok=True)
        completed += 1
        changed = True
    for leftover in [*directory.glob(f"*{CLEANED}"), *directory.glob(f"*{_MANIFEST_TMP}")]:
        leftover.unlink(missing_ok=True)
        changed = True
    if changed:
        fsync_dir(directory)
    return completed
