"""Remote log metadata of one partition: which segments are in the object store, in
which state, with what they hold (KIP-405's RemoteLogSegmentMetadata, kept per partition).

Kept in ``remote-log-metadata.json`` in the partition directory, rewritten whole and
atomically (temp file, fsync, rename, fsync of the directory) on every state change, so
after ``kill -9`` at any point it holds either the state before a change or after it.
The states follow Kafka's: COPY_SEGMENT_STARTED is recorded *before* the first object is
written, COPY_SEGMENT_FINISHED after the last one, and only then may the local segment
be deleted; DELETE_SEGMENT_STARTED is recorded before the first object is deleted and the
entry is dropped once all are gone. On start-up, an entry left in a STARTED state names
exactly the objects to remove (``orphans``): nothing is orphaned forever, and a segment
is served remotely only once it is wholly there. A per-partition file (not Kafka's
compacted ``__remote_log_metadata`` topic, which exists to replicate the metadata to
followers) lives and dies with the partition directory, needs no bootstrapping order
between topics, and one broker has no followers to tell.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from headrace.storage.swap import fsync_dir

METADATA_FILE = "remote-log-metadata.json"
COPY_STARTED = "COPY_SEGMENT_STARTED"
COPY_FINISHED = "COPY_SEGMENT_FINISHED"
DELETE_STARTED = "DELETE_SEGMENT_STARTED"
# What each remote segment is stored as: the log, its two indexes, the producer state
# snapshot at its end, the leader epochs of its batches, its aborted transactions.
OBJECT_SUFFIXES = (".log", ".index", ".timeindex", ".snapshot", ".leader_epoch", ".txnindex")


@dataclass(frozen=True)
class RemoteSegment:
    """One segment in the object store. ``end_offset`` is one past its last offset."""

    segment_id: str
    base_offset: int
    end_offset: int
    size: int
    max_timestamp: int
    state: str
    # (producer_id, first_offset, last_offset) of the aborted transactions overlapping it
    aborted: tuple[tuple[int, int, int], ...] = ()
    # (leader_epoch, start_offset) of the batches in it
    leader_epochs: tuple[tuple[int, int], ...] = ()

    def key(self, prefix: str, suffix: str) -> str:
        return f"{prefix}/{self.base_offset:020d}-{self.segment_id}{suffix}"

    def keys(self, prefix: str) -> list[str]:
        return [self.key(prefix, s) for s in OBJECT_SUFFIXES]


@dataclass
class RemoteLogMetadata:
    """The remote segments of a partition, ordered by base offset. Not thread-safe: the
    broker changes it on its event loop (the writes are short, small files)."""

    directory: Path
    # Object key prefix of the partition: ``<topic>-<topic id>/<partition>``.
    prefix: str
    segments: list[RemoteSegment] = field(default_factory=list)

    @classmethod
    def load(cls, directory: Path, prefix: str) -> RemoteLogMetadata:
        path = directory / METADATA_FILE
        meta = cls(directory, prefix)
        if path.exists():
            data = json.loads(path.read_text())
            meta.prefix = str(data.get("prefix", prefix))
            for raw in data["segments"]:
                raw["aborted"] = tuple(tuple(a) for a in raw.get("aborted", ()))
                raw["leader_epochs"] = tuple(tuple(e) for e in raw.get("leader_epochs", ()))
                meta.segments.append(RemoteSegment(**raw))
        return meta

    def save(self) -> None:
        path = self.directory / METADATA_FILE
        tmp = path.with_suffix(".tmp")
        text = json.dumps({"prefix": self.prefix,
                           "segments": [asdict(s) for s in self.segments]})
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(self.directory)

    # --- queries ------------------------------------------------------------------------

    @property
    def finished(self) -> list[RemoteSegment]:
        return [s for s in self.segments if s.state == COPY_FINISHED]

    @property
    def end_offset(self) -> int:
        """One past the highest offset wholly in the store (-1: nothing there yet)."""
        done = self.finished
        return done[-1].end_offset if done else -1

    @property
    def start_offset(self) -> int | None:
        done = self.finished
        return done[0].base_offset if done else None

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.finished)

    def segment_for(self, offset: int) -> RemoteSegment | None:
        """The finished segment holding ``offset``, if any."""
        for seg in self.finished:
            if seg.base_offset <= offset < seg.end_offset:
                return seg
        return None

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        return [(pid, first) for seg in self.finished for pid, first, last in seg.aborted
                if first < end and last >= start]

    # --- state changes (each persisted before returning) --------------------------------

    def start_copy(self, base_offset: int, end_offset: int, size: int, max_timestamp: int,
                   aborted: list[tuple[int, int, int]],
                   leader_epochs: list[tuple[int, int]]) -> RemoteSegment:
        seg = RemoteSegment(uuid.uuid4().hex, base_offset, end_offset, size, max_timestamp,
                            COPY_STARTED, tuple(aborted), tuple(leader_epochs))
        self.segments.append(seg)
        self.segments.sort(key=lambda s: s.base_offset)
        self.save()
        return seg

    def _set(self, seg: RemoteSegment, state: str) -> RemoteSegment:
        new = replace(seg, state=state)
        self.segments = [new if s.segment_id == seg.segment_id else s for s in self.segments]
        self.save()
        return new

    def finish_copy(self, seg: RemoteSegment,
                    leader_epochs: list[tuple[int, int]] | None = None) -> RemoteSegment:
        if leader_epochs is not None:
            seg = replace(seg, leader_epochs=tuple(leader_epochs))
            self.segments = [seg if s.segment_id == seg.segment_id else s
                             for s in self.segments]
        return self._set(seg, COPY_FINISHED)

    def start_delete(self, seg: RemoteSegment) -> RemoteSegment:
        return self._set(seg, DELETE_STARTED)

    def drop(self, seg: RemoteSegment) -> None:
        self.segments = [s for s in self.segments if s.segment_id != seg.segment_id]
        self.save()

    def orphans(self) -> list[RemoteSegment]:
        """Entries left mid-copy or mid-delete (by a crash or a failed store): their
        objects are to be removed and the entries dropped."""
        return [s for s in self.segments if s.state != COPY_FINISHED]
