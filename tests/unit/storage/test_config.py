"""Topic configs: Kafka's names, defaults, types, ranges, enums and error messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headrace.storage.config import (
    CONFIG_DEFS,
    LogConfig,
    broker_log_config,
    canonical_overrides,
    describe_topic_configs,
)
from headrace.storage.errors import InvalidConfigError


def test_kafka_defaults() -> None:
    configs = LogConfig().as_kafka_configs()
    assert configs["cleanup.policy"] == "delete"
    assert configs["retention.ms"] == str(7 * 24 * 3600 * 1000)
    assert configs["retention.bytes"] == "-1"
    assert configs["segment.bytes"] == str(1 << 30)
    assert configs["delete.retention.ms"] == "86400000"
    assert configs["min.cleanable.dirty.ratio"] == "0.5"
    assert configs["min.compaction.lag.ms"] == "0"
    assert configs["max.message.bytes"] == "1048588"
    assert configs["message.timestamp.type"] == "CreateTime"
    assert configs["compression.type"] == "producer"


def test_overrides_parse_types() -> None:
    cfg = LogConfig().with_overrides({
        "cleanup.policy": " delete , compact,compact", "retention.ms": "-1",
        "min.cleanable.dirty.ratio": "0.25", "headrace.flush.on.ack": "TRUE",
        "message.timestamp.type": "LogAppendTime", "compression.type": "zstd"})
    assert cfg.cleanup_policy == "compact,delete" and cfg.compact and cfg.delete
    assert cfg.retention_ms == -1 and cfg.min_cleanable_dirty_ratio == 0.25
    assert cfg.flush_on_ack is True and cfg.log_append_time
    assert canonical_overrides({"cleanup.policy": "delete,compact"}) == {
        "cleanup.policy": "compact,delete"}


@pytest.mark.parametrize(("name", "value", "message"), [
    ("retention.ms", "1h", "Invalid value 1h for configuration retention.ms: Not a number of type LONG"),
    ("retention.ms", "1_000", "Not a number of type LONG"),
    ("retention.ms", "-5", "Value must be at least -1"),
    ("segment.bytes", "13", "Value must be at least 14"),
    ("segment.bytes", str(2**31), "Not a number of type INT"),
    ("segment.ms", "0", "Value must be at least 1"),
    ("min.cleanable.dirty.ratio", "-0.1", "Value must be at least 0"),
    ("min.cleanable.dirty.ratio", "nan", "Not a number of type DOUBLE"),
    ("delete.retention.ms", "-1", "Value must be at least 0"),
    ("cleanup.policy", "", "must list at least one of: compact, delete"),
    ("cleanup.policy", "compact,purge", "'purge' is not one of: compact, delete"),
    ("message.timestamp.type", "createtime", "String must be one of: CreateTime, LogAppendTime"),
    ("headrace.flush.on.ack", "yes", "Expected value to be either true or false"),
    ("compression.type", "brotli", "String must be one of"),
    ("min.insync.replicas", "0", "Value must be at least 1"),
    ("no.such.config", "1", "Unknown topic config name: no.such.config"),
])
def test_invalid_values(name: str, value: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message.replace(".", r"\.")) as e:
        LogConfig().with_overrides({name: value})
    assert isinstance(e.value, ValueError)  # callers treating it as a ValueError still work


@given(st.sampled_from(sorted(CONFIG_DEFS)), st.text(max_size=12))
def test_arbitrary_values_are_accepted_or_refused_cleanly(name: str, value: str) -> None:
    try:
        canonical = canonical_overrides({name: value})
    except InvalidConfigError as e:
        assert name in str(e)
        return
    # What is accepted round-trips: its canonical form means the same.
    assert canonical_overrides(canonical) == canonical
    assert LogConfig().with_overrides(canonical) == LogConfig().with_overrides({name: value})


def test_broker_defaults_take_kafka_broker_names() -> None:
    cfg = broker_log_config({"log.retention.ms": "1000", "log.cleanup.policy": "compact",
                             "message.max.bytes": "2000", "segment.bytes": "4096"})
    assert (cfg.retention_ms, cfg.cleanup_policy, cfg.max_message_bytes, cfg.segment_bytes) == (
        1000, "compact", 2000, 4096)
    with pytest.raises(InvalidConfigError, match=r"Unknown broker log config name: log\.nope"):
        broker_log_config({"log.nope": "1"})


def test_described_sources_and_synonyms() -> None:
    broker = LogConfig().with_overrides({"retention.ms": "1000"})
    described = {c.name: c for c in describe_topic_configs(broker, {"segment.ms": "60000"})}
    assert set(described) == set(CONFIG_DEFS)
    seg = described["segment.ms"]
    assert (seg.value, seg.source) == ("60000", "topic")
    assert seg.synonyms == (("segment.ms", "60000", "topic"), ("log.roll.ms", "604800000", "default"))
    ret = described["retention.ms"]
    assert (ret.value, ret.source) == ("1000", "broker")
    assert described["cleanup.policy"].source == "default"
