"""The load generator's shards (``headrace.pipelines.fraud.load``) against a real broker:
several processes publish one run whose merged truth is exactly what the topics hold, with
each card in one shard only."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from headrace.pipelines.fraud.config import FraudConfig
from headrace.pipelines.fraud.generator import FraudRunError, FraudTopics
from headrace.pipelines.fraud.load import run_parallel, shard_configs
from headrace.testing import EmbeddedBroker, scaled
from tests.spark.kafka_helpers import read_all


def test_shards_split_the_rate_and_the_incidents_over_disjoint_cards() -> None:
    config = FraudConfig(seed=3, rate=9000, duration_s=20, users=50_000)
    shards = shard_configs(config, 3)
    assert [s.id_prefix for s in shards] == ["p0-", "p1-", "p2-"]
    assert sum(s.rate for s in shards) == pytest.approx(9000)
    assert sum(s.velocity_bursts for s in shards) == pytest.approx(config.velocity_bursts)
    assert len({s.seed for s in shards}) == 3
    assert all(s.users >= s.required_users() for s in shards)
    assert shard_configs(config, 1) == [config]
    with pytest.raises(FraudRunError, match="at least 1"):
        shard_configs(config, 0)


def test_two_processes_publish_one_run_with_its_merged_truth(broker: EmbeddedBroker) -> None:
    probe = FraudConfig(seed=5, rate=400, duration_s=10)
    config = FraudConfig(seed=5, rate=400, duration_s=10, users=probe.required_users(),
                         velocity_bursts=12, impossible_travel=12, amount_anomalies=12,
                         card_testing=12)
    topics = FraudTopics(transactions="load-txns", profiles="load-profiles")
    said: list[int] = []
    result = run_parallel(broker.bootstrap_servers, config, 2, topics=topics, realtime=False,
                          before_stream=said.append, timeout_s=scaled(120))
    truth = result.truth
    records = read_all(broker.bootstrap_servers, topics.transactions)
    assert len(records) == result.transactions == truth.total_txns + truth.malformed_count
    keys = Counter((m.key() or b"").decode()[:4] for m in records)
    assert set(keys) == {"cp0-", "cp1-"}, keys
    valid = [json.loads(m.value()) for m in records
             if m.value().startswith(b"{") and m.value().endswith(b"}")]
    ids = [v.get("txn_id") for v in valid]
    assert len(ids) == len(set(ids))
    # every record's card and user come from one shard
    assert all(v["card_id"][1:4] == v["user_id"][1:4] for v in valid
               if "card_id" in v and "user_id" in v and isinstance(v["user_id"], str))
    profiles = read_all(broker.bootstrap_servers, topics.profiles)
    assert len(profiles) == truth.profile_records
    assert said and said[0] == sum(len(json.loads(m.value())["card_ids"]) for m in profiles
                                   if json.loads(m.value())["updated_at"] < truth.start_ms)
    assert {i.card_id[:4] for i in truth.incidents} == {"cp0-", "cp1-"}


def test_a_run_may_last_longer_than_the_timeout(broker: EmbeddedBroker) -> None:
    """The timeout is how long the shards may take beyond the run's own length: a paced run
    of 15 s finishes under a 14 s timeout, which leaves the shards' start-up (seconds on a
    loaded machine) its margin (the timeout once counted the stream, and a 660 s run
    failed at 600 s)."""
    config = FraudConfig(seed=7, rate=100, duration_s=15)
    topics = FraudTopics(transactions="long-txns", profiles="long-profiles")
    result = run_parallel(broker.bootstrap_servers, config, 2, topics=topics, realtime=True,
                          timeout_s=scaled(14))
    assert result.stream_s >= 14.5
    assert result.transactions == len(read_all(broker.bootstrap_servers, topics.transactions))
