"""lateness_profile: histograms and suggested watermark delays from a known arrival order."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from headrace.spark import read_events
from headrace.streaming.lateness import lateness_profile
from headrace.testing import EmbeddedBroker
from tests.spark.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.spark


def test_profile_of_known_lateness(spark: SparkSession, broker: EmbeddedBroker,
                                   topic_name: str) -> None:
    create_topic(broker.bootstrap_servers, topic_name)
    base = 1_700_000_000_000
    # (event time offset, arrival offset) in ms, in arrival order. Behind the newest event
    # time seen before: 0, 0, 0, 5_000 (t=5s after 10s), 0, 30_000 (t=0 after 30s), 0...
    events = [(0, 10), (5_000, 5_020), (10_000, 10_050), (5_000, 11_000), (30_000, 30_100),
              (0, 31_000)] + [(40_000 + i, 40_000 + i + 2) for i in range(94)]
    produce(broker.bootstrap_servers, topic_name,
            [(None, json.dumps({"ts": base + t}).encode(), 0, base + a) for t, a in events])
    df = read_events(spark, topic_name, "ts long", event_time="ts",
                     dead_letter_topic=topic_name + "-dlq", streaming=False,
                     kafka_bootstrap_servers=broker.bootstrap_servers)
    profile = lateness_profile(df, completeness=(0.95, 0.99, 1.0))
    assert profile.events == 100
    assert profile.max_behind_ms == 30_000
    assert profile.suggest(1.0) == 30_000
    assert profile.suggest(0.95) == 0  # 98 of 100 events are never behind
    assert 5_000 <= profile.suggest(0.99) <= 30_000
    # behind: 98 at 0, one in [1 s, 10 s), one in [10 s, 1 min)
    assert profile.behind_histogram == (98, 0, 0, 0, 1, 1, 0, 0, 0)
    # delay (arrival - event time): 2 ms x94 and 10/20/50 ms, 6 s, 100 ms, 31 s
    assert sum(profile.delay_histogram) == 100
    assert profile.delay_histogram[1] == 94 + 0  # [1 ms, 10 ms)
    assert "watermark delay for 100.000% on time" in profile.render()
