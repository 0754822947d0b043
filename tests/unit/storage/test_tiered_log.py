"""Tiered storage at the storage layer, on the filesystem store: a copied segment reads
back from the store byte for byte as it did locally (by offset, through the chunk cache,
by time), local deletion keeps the log start, remote retention moves it, metadata states
survive a reopen and a crash mid-copy or mid-delete leaves entries whose objects are
removed, and the topic-config checks answer Kafka's messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.storage.config import LogConfig
from headrace.storage.errors import InvalidConfigError, RemoteReadRequiredError
from headrace.storage.log import PartitionLog
from headrace.storage.remote_config import check_remote_topic_config
from headrace.storage.remote_metadata import (
    COPY_FINISHED,
    COPY_STARTED,
    DELETE_STARTED,
    RemoteLogMetadata,
)
from headrace.storage.remote_reader import RemoteReader
from headrace.storage.remote_store import FilesystemStorage
from headrace.storage.tiered_log import (
    copy_segment,
    delete_objects,
    delete_tiered_local,
    next_to_copy,
    remote_victims,
    start_copy,
)
from tests.unit.storage.support import append, batches

TIERED = LogConfig(segment_bytes=400, retention_ms=-1, remote_storage_enable=True,
                   local_retention_bytes=1, index_interval_bytes=100)
PREFIX = "t-0000/0"


def tiered_log(tmp_path: Path, config: LogConfig = TIERED) -> PartitionLog:
    log = PartitionLog(tmp_path / "t-0", config, recover_fully=False)
    log.attach_remote(RemoteLogMetadata.load(log.directory, PREFIX))
    return log


def copy_all(log: PartitionLog, store: FilesystemStorage) -> int:
    assert log.remote is not None
    copied = 0
    while (seg := next_to_copy(log)) is not None:
        job = start_copy(log, seg)
        log.remote.finish_copy(job.remote, copy_segment(store, PREFIX, job))
        copied += 1
    return copied


def test_copied_segments_read_back_from_the_store(tmp_path: Path) -> None:
    store = FilesystemStorage(tmp_path / "store")
    log = tiered_log(tmp_path)
    stored = [append(log, 3, timestamp_ms=1000 + 10 * i) for i in range(30)]
    assert len(log.segments) > 5
    local = {s.base_offset: log.read(s.base_offset, 1 << 20).data for s in stored}
    closed = len(log.segments) - 1
    assert copy_all(log, store) == closed
    assert delete_tiered_local(log, 0) == closed
    assert log.log_start_offset == 0 and log.local_log_start_offset > 0
    with pytest.raises(RemoteReadRequiredError):
        log.read(0, 100)
    reader = RemoteReader(store, chunk_bytes=128, cache_bytes=1024)
    remote = log.remote
    assert remote is not None
    for s in stored:
        if s.base_offset >= log.local_log_start_offset:
            continue
        seg = remote.segment_for(s.base_offset + 1)
        assert seg is not None
        data = reader.read(PREFIX, seg, s.base_offset + 1, 1)  # KIP-74: one whole batch
        assert len(batches(data)) == 1 and data == local[s.base_offset][:len(data)]
        whole = reader.read(PREFIX, seg, s.base_offset, 1 << 20)
        assert batches(whole)[0].base_offset == s.base_offset
        assert reader.offset_for_timestamp(PREFIX, seg, s.max_timestamp, 0) == (
            s.base_offset, s.max_timestamp)
    assert reader.stats.cache_hits > 0 and reader._cached <= 1024
    log.close()


def test_metadata_states_survive_reopen_and_orphans_are_removed(tmp_path: Path) -> None:
    store = FilesystemStorage(tmp_path / "store")
    log = tiered_log(tmp_path)
    for i in range(12):
        append(log, 3, timestamp_ms=1000 + i)
    copy_all(log, store)
    assert log.remote is not None
    # A copy cut short (crash after the objects, before COPY_SEGMENT_FINISHED).
    log.roll()
    pending = next_to_copy(log)
    assert pending is not None
    job = start_copy(log, pending)
    copy_segment(store, PREFIX, job)
    reloaded = RemoteLogMetadata.load(log.directory, PREFIX)
    states = [s.state for s in reloaded.segments]
    assert states[-1] == COPY_STARTED and set(states[:-1]) == {COPY_FINISHED}
    orphans = reloaded.orphans()
    assert [o.segment_id for o in orphans] == [job.remote.segment_id]
    delete_objects(store, PREFIX, orphans)
    assert not any(job.remote.segment_id in k for k in store.list(""))
    assert reloaded.end_offset == pending.base_offset  # the cut copy is never served
    log.close()


def test_remote_retention_moves_the_log_start_first(tmp_path: Path) -> None:
    store = FilesystemStorage(tmp_path / "store")
    log = tiered_log(tmp_path)
    for i in range(20):
        append(log, 3, timestamp_ms=1000 + i)
    copy_all(log, store)
    delete_tiered_local(log, 0)
    assert log.remote is not None
    first = log.remote.finished[0]
    log.delete_records(first.end_offset + 1)
    victims = remote_victims(log, 0)
    assert [v.segment_id for v in victims] == [first.segment_id]
    assert victims[0].state == DELETE_STARTED
    assert log.log_start_offset == first.end_offset + 1
    assert RemoteLogMetadata.load(log.directory, PREFIX).segments[0].state == DELETE_STARTED
    delete_objects(store, PREFIX, victims)
    log.remote.drop(victims[0])
    assert not any(first.segment_id in k for k in store.list(""))
    log.close()
    reopened = tiered_log(tmp_path)
    assert reopened.log_start_offset == first.end_offset + 1
    reopened.close()


def test_kafka_checks_of_remote_topic_configs() -> None:
    on = TIERED
    with pytest.raises(InvalidConfigError, match="Tiered Storage functionality is disabled"):
        check_remote_topic_config(on, system_enable=False)
    with pytest.raises(InvalidConfigError, match=r"only supports topics with cleanup\.policy"):
        check_remote_topic_config(on.with_overrides({"cleanup.policy": "compact"}), True)
    with pytest.raises(InvalidConfigError, match=r"Value must not be more than retention\.ms "
                                                 r"property value: 1000"):
        check_remote_topic_config(on.with_overrides(
            {"retention.ms": "1000", "local.retention.ms": "2000"}), True)
    with pytest.raises(InvalidConfigError, match="invalid to disable remote storage"):
        check_remote_topic_config(LogConfig(), True, was_enabled=True)
    check_remote_topic_config(on, True)
    check_remote_topic_config(LogConfig(), False)
