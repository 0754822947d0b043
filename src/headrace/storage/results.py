"""What reads and appends of a partition log return."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_start_offset: int


class FileRegion:
    """A byte range of a segment file, with its own descriptor (close it, or use ``with``)."""

    __slots__ = ("fd", "length", "position")

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd = fd
        self.position = position
        self.length = length

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> FileRegion:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class RegionResult:
    """Where whole batches are: ``region`` is None when there is nothing to read."""

    region: FileRegion | None
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches read from one segment: ``data`` may be empty at the log end."""

    data: bytes
    high_watermark: int
    log_start_offset: int
