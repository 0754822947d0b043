"""Sparse, file-backed indexes of one segment.

Both indexes are append-only files of fixed-width big-endian entries, searched with
``pread`` so the broker's memory does not grow with the log:

* offset index: ``(relative_offset u32, position u32)``: for an indexed batch, where it
  starts in the segment file;
* time index: ``(timestamp i64, relative_offset u32)``: the first batch whose max
  timestamp reached ``timestamp``; timestamps in it are strictly increasing.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class _IndexFile:
    """An append-only file of fixed-size entries. Not thread-safe; never blocks for long."""

    def __init__(self, path: Path, entry: struct.Struct) -> None:
        self.path = path
        self._entry = entry
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        usable = size - size % entry.size
        if usable != size:  # a torn entry from a crash: drop it
            os.ftruncate(self._fd, usable)
        self.entries = usable // entry.size
        # The last entry, kept in memory: appends compare against it on every batch, and a
        # pread per append was a system call per produced batch.
        self._last: tuple[int, int] | None = self._get(self.entries - 1) if self.entries else None

    def _get(self, i: int) -> tuple[int, int]:
        raw = os.pread(self._fd, self._entry.size, i * self._entry.size)
        a, b = self._entry.unpack(raw)
        return int(a), int(b)

    def _append(self, a: int, b: int) -> None:
        os.pwrite(self._fd, self._entry.pack(a, b), self.entries * self._entry.size)
        self.entries += 1
        self._last = (a, b)

    def _floor(self, key: int, field: int) -> int:
        """Index of the last entry whose ``field`` is <= key, or -1."""
        lo, hi = 0, self.entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if self._get(mid)[field] <= key:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def last(self) -> tuple[int, int] | None:
        return self._last

    def truncate(self, entries: int) -> None:
        os.ftruncate(self._fd, entries * self._entry.size)
        self.entries = entries
        self._last = self._get(entries - 1) if entries else None

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


class OffsetIndex(_IndexFile):
    """Maps offsets (relative to the segment's base offset) to file positions."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, _OFFSET_ENTRY)

    def append(self, relative_offset: int, position: int) -> None:
        self._append(relative_offset, position)

    def lookup(self, relative_offset: int) -> int:
        """Position of the last indexed batch starting at or before ``relative_offset``; 0 if none."""
        i = self._floor(relative_offset, 0)
        return self._get(i)[1] if i >= 0 else 0

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position``; 0 if none."""
        i = self._floor(position, 1)
        return self._get(i)[1] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past ``position`` (after a log truncation)."""
        keep = self.entries
        while keep and self._get(keep - 1)[1] >= position:
            keep -= 1
        self.truncate(keep)


class TimeIndex(_IndexFile):
    """Maps timestamps to the first batch (relative offset) reaching them."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, _TIME_ENTRY)

    def append(self, timestamp: int, relative_offset: int) -> None:
        last = self.last()
        if last is None or timestamp > last[0]:
            self._append(timestamp, relative_offset)

    def lookup(self, timestamp: int) -> int:
        """Relative offset to start scanning from for the first batch with max timestamp
        >= ``timestamp``: the entry before the first entry reaching it, else 0."""
        i = self._floor(timestamp - 1, 0)
        return self._get(i)[1] if i >= 0 else 0

    def max_timestamp(self) -> int:
        last = self.last()
        return last[0] if last else -1

    def truncate_to_offset(self, relative_offset: int) -> None:
        keep = self.entries
        while keep and self._get(keep - 1)[1] >= relative_offset:
            keep -= 1
        self.truncate(keep)
