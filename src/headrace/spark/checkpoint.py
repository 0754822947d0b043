"""Makes a checkpoint that crashed inside its first offsets write restartable.

Spark writes each entry of a checkpoint's ``offsets`` and ``commits`` logs to a hidden temp
file in the same folder (``.<batch>.<uuid>.tmp``, with ``..<batch>.<uuid>.tmp.crc`` beside it
on the local file system) and renames it into place. A kill -9, OOM kill or power loss
between the two leaves the temp file behind. Past batch 0 that is harmless: the logs ignore
names that are not batch numbers. But a query whose ``offsets`` log holds no batch yet
counts as new, and Spark 4.3 refuses to start a new query on a non-empty ``offsets``,
``commits`` or ``state`` folder (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``, from
``spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart``). So a crash in the first
milliseconds of a query's life left a checkpoint no restart could use.

``discard_unfinished_first_batch(checkpoint)``, called before ``start()`` on a checkpoint,
removes those temp files when the offsets log has no batch, and nothing else. Every query
headrace starts calls it; an application starting its own queries on ``format("headrace")``
should too. Local checkpoints only (a path or ``file:`` URI); others are left as they are.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

# Spark's CheckpointFileManager temp files and their Hadoop checksums.
_TEMP = re.compile(r"\.\.?\d+\.[0-9a-f-]+\.tmp(\.crc)?")
_LOGS = ("offsets", "commits")


def local_path(checkpoint: str | Path) -> Path | None:
    """``checkpoint`` as a local path: a plain path or a ``file:`` URI; None for another
    scheme (``s3a://``, ``hdfs://``)."""
    text = str(checkpoint)
    scheme = urlparse(text).scheme
    if scheme == "file":
        return Path(urlparse(text).path)
    if scheme and len(scheme) > 1:  # one letter: a Windows drive, still a path
        return None
    return Path(text)


def discard_unfinished_first_batch(checkpoint: str | Path) -> list[Path]:
    """If ``checkpoint``'s offsets log holds no batch, remove Spark's temp files from its
    ``offsets`` and ``commits`` folders (a crash inside the first write left them; no batch
    was ever planned, so they hold nothing a restart needs). Returns the removed files.

    A checkpoint with a planned batch, a missing one and a non-local one are left as they
    are; so is any other file, so Spark still refuses a folder reused by another query."""
    root = local_path(checkpoint)
    if root is None or not (root / "offsets").is_dir():
        return []
    if any(p.name.isdigit() for p in (root / "offsets").iterdir()):
        return []
    removed: list[Path] = []
    for log in _LOGS:
        folder = root / log
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if _TEMP.fullmatch(p.name) and p.is_file():
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed
