"""The log start offset: DeleteRecords, its persistence, and what reads see below it."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.storage.config import LogConfig
from headrace.storage.errors import OffsetOutOfRangeError, PolicyViolationError
from headrace.storage.log import PartitionLog
from tests.unit.storage.support import append, reopen


def new_log(path: Path, cleanup_policy: str = "delete") -> PartitionLog:
    cfg = LogConfig(segment_bytes=200, retention_ms=-1, cleanup_policy=cleanup_policy)
    return PartitionLog(path / "t-0", cfg, recover_fully=False)


def test_delete_records_advances_and_persists(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    for ts in range(10):
        append(log, 1, timestamp_ms=1000 + ts)
    first_segments = len(log.segments)
    assert log.delete_records(5) == 5
    assert log.log_start_offset == 5
    assert all(s.next_offset > 5 for s in log.segments)  # wholly-below segments are gone
    assert len(log.segments) < first_segments
    assert log.delete_records(2) == 5  # never lowered
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)
    assert log.read(5, 1000).data  # may start mid-segment: the batch holding 5
    assert log.offset_for_timestamp(0) == (5, 1005)  # nothing below the log start
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(11)
    log = reopen(log, recover_fully=True)
    assert log.log_start_offset == 5
    assert log.delete_records(-1) == 10  # the high watermark
    assert log.read(10, 1000).data == b""
    append(log, 1)
    assert (log.log_start_offset, log.log_end_offset) == (10, 11)
    log.close()


def test_delete_records_needs_the_delete_policy(tmp_path: Path) -> None:
    log = new_log(tmp_path, cleanup_policy="compact")
    append(log, 1)
    with pytest.raises(PolicyViolationError, match=r"cleanup\.policy is compact"):
        log.delete_records(1)
    log.close()


def test_retention_also_drops_segments_below_a_log_start(tmp_path: Path) -> None:
    log = new_log(tmp_path, cleanup_policy="compact")
    for _ in range(6):
        append(log, 1)
    log._log_start_offset = 4  # as left by DeleteRecords before the policy changed
    assert log.enforce_retention(now_ms=0) >= 1
    assert log.segments[0].next_offset > 4
    log.close()
