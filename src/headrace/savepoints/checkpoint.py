"""What a Structured Streaming checkpoint says about one committed micro-batch.

Spark's logs (``metadata``, ``offsets/<n>``, ``commits/<n>``) are plain text: ``offsets/n``
is a version line, the batch's metadata (watermark, conf) and one line per source with the
offsets the batch read up to; ``commits/n`` holds the watermark of the batch after. A batch
is committed once ``commits/n`` exists: its state (version n + 1 of every state store)
and its output are then final. Reading these files needs no SparkSession.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headrace.savepoints.errors import SavepointError


@dataclass(frozen=True)
class CommittedBatch:
    """``batch_id``'s view of the checkpoint at ``path``: the query's id, each source's
    end offsets (the offsets the next batch starts from; None for a source without any),
    the watermark the next batch runs with and the number of shuffle partitions."""

    path: Path
    query_id: str
    batch_id: int
    sources: tuple[Any, ...]
    watermark_ms: int
    shuffle_partitions: int
    checkpoint_format: int = 1
    """Spark's state checkpoint format: 2 when ``commits/n`` names each state store's
    files by unique ids (Real-Time Mode writes it), else 1."""


def _numbered(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError as e:
        raise SavepointError(f"cannot read {path}: {e.strerror}") from e


def committed_batch(checkpoint: str | Path, batch_id: int | None = None) -> CommittedBatch:
    """The last committed batch of ``checkpoint`` (or ``batch_id``, which must be
    committed). Raises ``SavepointError`` for a folder that is no checkpoint or has no
    committed batch."""
    path = Path(checkpoint)
    meta = path / "metadata"
    if not meta.is_file():
        raise SavepointError(f"{path} is not a streaming checkpoint (no metadata file)")
    query_id = json.loads(_lines(meta)[0])["id"]
    committed = _numbered(path / "commits")
    if not committed:
        raise SavepointError(f"checkpoint {path} has no committed micro-batch yet")
    if batch_id is None:
        batch_id = committed[-1]
    elif batch_id not in committed:
        raise SavepointError(f"batch {batch_id} is not committed in checkpoint {path} "
                             f"(committed: {committed[0]}..{committed[-1]})")
    offsets = _lines(path / "offsets" / str(batch_id))
    conf = json.loads(offsets[1]).get("conf", {})
    sources = tuple(None if line.strip() == "-" else json.loads(line) for line in offsets[2:])
    commit = _lines(path / "commits" / str(batch_id))
    committed_meta = json.loads(commit[1]) if len(commit) > 1 else {}
    watermark = committed_meta.get("nextBatchWatermarkMs", 0)
    return CommittedBatch(path, query_id, batch_id, sources, int(watermark),
                          int(conf.get("spark.sql.shuffle.partitions", 0)),
                          2 if committed_meta.get("stateUniqueIds") else 1)
