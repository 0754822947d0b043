"""LogManager: topics on disk, configs, reopen after clean and unclean shutdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headrace.storage.config import LogConfig
from headrace.storage.errors import InvalidTopicError, TopicExistsError, UnknownTopicError
from headrace.storage.log import CLEAN_SHUTDOWN_FILE
from headrace.storage.manager import PRODUCER_ID_BLOCK, LogManager, validate_topic_name
from tests.unit.storage.support import append, consume_all

DEFAULTS = LogConfig()


def crash(mgr: LogManager) -> None:
    """Drop the manager as a killed process would: fds closed, nothing flushed or marked."""
    for log in mgr.all_logs():
        log.close()


def test_fresh_data_dir(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path / "data", DEFAULTS)
    assert mgr.topics == {}
    assert not mgr.recovered_uncleanly
    assert (tmp_path / "data" / "meta.json").exists()
    assert (tmp_path / "data" / "__topics").is_dir()
    cluster_id = mgr.cluster_id
    mgr.close()
    assert (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).exists()
    again = LogManager(tmp_path / "data", DEFAULTS)
    assert again.cluster_id == cluster_id
    assert not (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).exists()  # until the next close
    again.close()


def test_create_topic(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    topic = mgr.create_topic("orders", 3, {"segment.bytes": "1000", "retention.ms": "-1"})
    assert topic.name == "orders"
    assert len(topic.partitions) == 3
    assert topic.config.segment_bytes == 1000
    assert topic.config.retention_ms == -1
    assert topic.config.index_interval_bytes == DEFAULTS.index_interval_bytes
    assert all(log.config == topic.config for log in topic.partitions)
    for p in range(3):
        assert (tmp_path / f"orders-{p}").is_dir()
        assert mgr.get_log("orders", p).log_end_offset == 0
    meta = json.loads((tmp_path / "__topics" / "orders.json").read_text())
    assert meta == {"name": "orders", "topic_id": str(topic.topic_id), "partitions": 3,
                    "configs": {"segment.bytes": "1000", "retention.ms": "-1"}}
    mgr.close()


def test_create_topic_errors(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.create_topic("t", 1)
    with pytest.raises(TopicExistsError):
        mgr.create_topic("t", 1)
    with pytest.raises(ValueError):
        mgr.create_topic("u", 0)
    with pytest.raises(ValueError):
        mgr.create_topic("u", 1, {"no.such.config": "1"})
    with pytest.raises(ValueError):
        mgr.create_topic("u", 1, {"segment.bytes": "big"})
    assert "u" not in mgr.topics
    assert not (tmp_path / "__topics" / "u.json").exists()
    assert not (tmp_path / "u-0").exists()
    mgr.close()


def test_passthrough_configs_are_accepted_and_stored(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    topic = mgr.create_topic("t", 1, {"min.insync.replicas": "2", "compression.type": "lz4"})
    assert topic.config == DEFAULTS
    assert topic.config_overrides == {"min.insync.replicas": "2", "compression.type": "lz4"}
    mgr.close()


def test_validate_only_creates_nothing(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    topic = mgr.create_topic("t", 2, validate_only=True)
    assert topic.partitions == []
    assert mgr.topics == {}
    assert not (tmp_path / "__topics" / "t.json").exists()
    assert not (tmp_path / "t-0").exists()
    mgr.create_topic("t", 2)
    mgr.add_partitions("t", 5, validate_only=True)
    assert len(mgr.get_topic("t").partitions) == 2
    assert not (tmp_path / "t-2").exists()
    mgr.close()


@pytest.mark.parametrize("name", [
    "a", "orders", "my.topic", "my_topic", "my-topic", "A1.b_2-c", "__consumer_offsets",
    "x" * 249, "..a", "a..",
])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize("name", [
    "", ".", "..", "x" * 250, "a b", "a/b", "../etc", "a\\b", "a:b", "tópico", "a\tb",
    "a\x00b", "a*", "\n",
])
def test_illegal_topic_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)
    mgr = LogManager(tmp_path, DEFAULTS)
    with pytest.raises(InvalidTopicError):
        mgr.create_topic(name, 1)
    assert list((tmp_path / "__topics").iterdir()) == []
    mgr.close()


def test_topic_name_with_trailing_newline_is_illegal() -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name("orders\n")


def test_delete_topic(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.create_topic("t", 2)
    append(mgr.get_log("t", 0), 3)
    deleted = mgr.delete_topic("t")
    assert deleted.name == "t"
    assert "t" not in mgr.topics
    assert not (tmp_path / "__topics" / "t.json").exists()
    assert not (tmp_path / "t-0").exists()
    assert not (tmp_path / "t-1").exists()
    with pytest.raises(UnknownTopicError):
        mgr.get_topic("t")
    with pytest.raises(UnknownTopicError):
        mgr.delete_topic("t")
    mgr.close()
    again = LogManager(tmp_path, DEFAULTS)
    assert again.topics == {}
    again.close()


def test_recreated_topic_gets_an_empty_log(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    old = mgr.create_topic("t", 1)
    append(mgr.get_log("t", 0), 3)
    mgr.delete_topic("t")
    new = mgr.create_topic("t", 1)
    assert new.topic_id != old.topic_id
    log = mgr.get_log("t", 0)
    assert (log.log_end_offset, log.size_bytes) == (0, 0)
    assert append(log, 1).base_offset == 0
    mgr.close()


def test_leftovers_of_an_interrupted_delete_do_not_come_back(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.create_topic("t", 1)
    append(mgr.get_log("t", 0), 3)
    mgr.close()
    # A crash after the metadata was removed, before the partition directory was.
    (tmp_path / "__topics" / "t.json").unlink()
    mgr = LogManager(tmp_path, DEFAULTS)
    assert "t" not in mgr.topics
    mgr.create_topic("t", 1)
    assert mgr.get_log("t", 0).log_end_offset == 0
    mgr.close()


def test_get_log_errors(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.create_topic("t", 2)
    with pytest.raises(UnknownTopicError):
        mgr.get_log("nope", 0)
    for p in (-1, 2):
        with pytest.raises(UnknownTopicError):
            mgr.get_log("t", p)
    mgr.close()


def test_add_partitions(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.create_topic("t", 1, {"segment.bytes": "5000"})
    append(mgr.get_log("t", 0), 2)
    mgr.add_partitions("t", 3)
    topic = mgr.get_topic("t")
    assert len(topic.partitions) == 3
    assert mgr.get_log("t", 2).config.segment_bytes == 5000
    assert mgr.get_log("t", 0).log_end_offset == 2  # existing partitions untouched
    for total in (3, 2):
        with pytest.raises(ValueError):
            mgr.add_partitions("t", total)
    with pytest.raises(UnknownTopicError):
        mgr.add_partitions("nope", 4)
    mgr.close()
    again = LogManager(tmp_path, DEFAULTS)
    assert len(again.get_topic("t").partitions) == 3
    assert again.get_log("t", 0).log_end_offset == 2
    again.close()


def test_alter_configs(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.create_topic("t", 2, {"segment.bytes": "5000"})
    mgr.alter_configs("t", {"retention.ms": "60000"})
    topic = mgr.get_topic("t")
    # Replaces the overrides: segment.bytes goes back to the default.
    assert topic.config_overrides == {"retention.ms": "60000"}
    assert topic.config.retention_ms == 60000
    assert topic.config.segment_bytes == DEFAULTS.segment_bytes
    assert all(log.config is topic.config for log in topic.partitions)
    with pytest.raises(ValueError):
        mgr.alter_configs("t", {"retention.ms": "soon"})
    with pytest.raises(ValueError):
        mgr.alter_configs("t", {"bogus": "1"})
    assert mgr.get_topic("t").config_overrides == {"retention.ms": "60000"}  # unchanged
    with pytest.raises(UnknownTopicError):
        mgr.alter_configs("nope", {})
    mgr.close()
    again = LogManager(tmp_path, DEFAULTS)
    assert again.get_topic("t").config.retention_ms == 60000
    assert again.get_log("t", 1).config.retention_ms == 60000
    again.close()


def test_alter_configs_applies_to_later_appends(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.create_topic("t", 1)
    log = mgr.get_log("t", 0)
    append(log, 1)
    mgr.alter_configs("t", {"segment.bytes": "14"})
    append(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 1]
    mgr.close()


def test_topic_metadata_persists_across_reopen(tmp_path: Path) -> None:
    defaults = LogConfig(segment_bytes=777)
    mgr = LogManager(tmp_path, defaults)
    a = mgr.create_topic("a", 2, {"retention.bytes": "123"})
    mgr.create_topic("b", 1)
    stored = [append(mgr.get_log("a", 1), n) for n in (1, 2, 3)]
    mgr.close()
    again = LogManager(tmp_path, defaults)
    assert sorted(again.topics) == ["a", "b"]
    ta = again.get_topic("a")
    assert ta.topic_id == a.topic_id
    assert ta.config_overrides == {"retention.bytes": "123"}
    assert ta.config == defaults.with_overrides({"retention.bytes": "123"})
    assert len(ta.partitions) == 2
    assert again.get_topic("b").config == defaults
    log = again.get_log("a", 1)
    assert log.log_end_offset == 6
    assert consume_all(log) == b"".join(s.data for s in stored)
    assert not again.recovered_uncleanly
    again.close()


def test_unclean_shutdown_recovers_a_torn_tail(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.create_topic("t", 1)
    log = mgr.get_log("t", 0)
    first = append(log, 2)
    append(log, 2)
    seg_path = log.segments[-1].path
    crash(mgr)
    with open(seg_path, "r+b") as f:
        f.truncate(len(first.data) + 30)  # tear the second batch
    again = LogManager(tmp_path, DEFAULTS)
    assert again.recovered_uncleanly
    assert again.truncated_bytes == 30
    log = again.get_log("t", 0)
    assert log.log_end_offset == 2
    assert consume_all(log) == first.data
    assert append(log, 1).base_offset == 2
    again.close()
    third = LogManager(tmp_path, DEFAULTS)
    assert not third.recovered_uncleanly
    assert third.get_log("t", 0).log_end_offset == 3
    third.close()


def test_unclean_flag_needs_existing_topics(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.allocate_producer_id()
    crash(mgr)
    assert not LogManager(tmp_path, DEFAULTS).recovered_uncleanly  # nothing to recover


@pytest.mark.parametrize("clean", [True, False])
def test_producer_ids_are_unique_across_reopen(tmp_path: Path, clean: bool) -> None:
    seen: list[int] = []
    for _ in range(3):
        mgr = LogManager(tmp_path, DEFAULTS)
        seen += [mgr.allocate_producer_id() for _ in range(PRODUCER_ID_BLOCK // 2 + 7)]
        if clean:
            mgr.close()
        else:
            crash(mgr)
    assert len(set(seen)) == len(seen)
    assert all(pid >= 0 for pid in seen)
    assert seen[: PRODUCER_ID_BLOCK // 2 + 7] == list(range(PRODUCER_ID_BLOCK // 2 + 7))


def test_producer_id_blocks_are_persisted_before_use(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    first = mgr.allocate_producer_id()
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["producer_id_limit"] > first
    assert meta["cluster_id"] == mgr.cluster_id
    crash(mgr)
    assert LogManager(tmp_path, DEFAULTS).allocate_producer_id() >= meta["producer_id_limit"]


def test_all_logs(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.create_topic("a", 2)
    mgr.create_topic("b", 3)
    assert len(mgr.all_logs()) == 5
    assert {log.directory.name for log in mgr.all_logs()} == {
        "a-0", "a-1", "b-0", "b-1", "b-2"}
    mgr.close()


def test_config_names_of_older_versions_still_load(tmp_path: Path) -> None:
    """Topic config files written before headrace's own settings got their prefix (and
    with message.format.version, which Kafka 4 removed) keep loading."""
    mgr = LogManager(tmp_path, DEFAULTS)
    mgr.create_topic("old", 1, {"retention.ms": "1000"})
    mgr.close()
    meta = tmp_path / "__topics" / "old.json"
    stored = json.loads(meta.read_text())
    stored["configs"] = {"retention.ms": "1000", "flush.on.ack": "true",
                         "message.format.version": "3.0-IV1"}
    meta.write_text(json.dumps(stored))
    again = LogManager(tmp_path, DEFAULTS)
    topic = again.topics["old"]
    assert topic.config.flush_on_ack and topic.config.retention_ms == 1000
    assert topic.config_overrides == {"retention.ms": "1000", "headrace.flush.on.ack": "true"}
    again.close()
