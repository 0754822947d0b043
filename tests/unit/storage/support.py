"""Helpers shared by the storage unit tests: building, appending and reading batches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from headrace.protocol.records import BatchHeader, build_batch, scan_batches, validate_batches
from headrace.storage.config import LogConfig
from headrace.storage.log import AppendResult, PartitionLog
from headrace.storage.segment import segment_name

Records = list[tuple[bytes | None, bytes | None]]

RECORDS = st.lists(
    st.tuples(st.none() | st.binary(max_size=8), st.binary(max_size=40)), min_size=1, max_size=5)


@dataclass(frozen=True)
class Stored:
    """One appended batch as the log should hold it: offsets assigned, bytes rewritten."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    data: bytes

    @property
    def offsets(self) -> range:
        return range(self.base_offset, self.last_offset + 1)


def make_batch(records: Records | int = 1, timestamp_ms: int = 0, **kw: int) -> bytearray:
    if isinstance(records, int):
        records = [(b"k", b"v%d" % i) for i in range(records)]
    return bytearray(build_batch(records, timestamp_ms=timestamp_ms, **kw))


def append(log: PartitionLog, records: Records | int = 1, timestamp_ms: int = 0,
           **kw: int) -> Stored:
    data = make_batch(records, timestamp_ms, **kw)
    result = log.append(data, validate_batches(data))
    assert result.base_offset == validate_batches(data)[0].base_offset
    return Stored(result.base_offset, result.last_offset, timestamp_ms, bytes(data))


def append_raw(log: PartitionLog, data: bytearray) -> AppendResult:
    return log.append(data, validate_batches(data))


def batches(data: bytes) -> list[BatchHeader]:
    """Headers of ``data``, which must be whole valid batches and nothing else."""
    found = [h for _, h in scan_batches(data)]
    assert sum(h.size for h in found) == len(data)
    return found


def consume_all(log: PartitionLog, start: int | None = None, max_bytes: int = 1 << 20) -> bytes:
    """Read from ``start`` to the log end the way a consumer does (next offset after each
    returned batch), returning the concatenated bytes."""
    offset = log.log_start_offset if start is None else start
    out = bytearray()
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes).data
        assert data, f"no progress at offset {offset}"
        hs = batches(data)
        out += data
        offset = hs[-1].last_offset + 1
    return bytes(out)


def segment_files(directory: Path, base_offset: int) -> list[Path]:
    name = segment_name(base_offset)
    return [directory / f"{name}{suffix}" for suffix in (".log", ".index", ".timeindex")]


def reopen(log: PartitionLog, recover_fully: bool = True,
           config: LogConfig | None = None) -> PartitionLog:
    """Close the file descriptors (no flush, no clean-shutdown marker) and reopen."""
    log.close()
    return PartitionLog(log.directory, config or log.config, recover_fully=recover_fully)
