"""read_events: typed columns from JSON, event time from a field, and exactly the malformed
records in the dead-letter topic with their bytes, error and source coordinates."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from headrace.spark import read_events
from headrace.testing import EmbeddedBroker, scaled
from tests.spark.kafka_helpers import create_topic, forget_last_commit, produce, read_all

pytestmark = pytest.mark.spark

SCHEMA = "card_id string not null, amount double not null, ts long not null, tags array<string>"

GOOD = [
    {"card_id": "c1", "amount": 12.5, "ts": 1_700_000_000_000, "tags": ["a"]},
    {"card_id": "c2", "amount": 3, "ts": 1_700_000_001_000},
    {"card_id": "c3", "amount": 99.0, "ts": 1_700_000_002_000, "tags": None, "extra": 1},
]
BAD = [
    (b"not json at all", "not JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (json.dumps({"amount": 1.0, "ts": 1}).encode(), "field 'card_id': null where a value"),
    (json.dumps({"card_id": "c9", "amount": "ten", "ts": 1}).encode(),
     "field 'amount': expected a number"),
    (json.dumps({"card_id": "c9", "amount": 1.0, "ts": 1, "tags": [1]}).encode(),
     "field 'tags': expected a string"),
]


def _collect(df: DataFrame, checkpoint: Path, out: list[Any]) -> None:
    q = df.writeStream.foreachBatch(lambda b, i: out.extend(b.collect())) \
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    q.awaitTermination(scaled(120))
    assert q.exception() is None, q.exception()


def test_typed_events_and_dead_letters(spark: SparkSession, broker: EmbeddedBroker,
                                       topic_name: str, tmp_path: Path) -> None:
    dlq = topic_name + "-dlq"
    create_topic(broker.bootstrap_servers, topic_name, 2)
    rows: list[tuple[Any, ...]] = [(f"g{i}".encode(), json.dumps(g).encode(), i % 2)
                                   for i, g in enumerate(GOOD)]
    rows += [(f"b{i}".encode(), raw, i % 2) for i, (raw, _) in enumerate(BAD)]
    placed = produce(broker.bootstrap_servers, topic_name, rows)
    events = read_events(spark, topic_name, SCHEMA, event_time="ts", dead_letter_topic=dlq,
                         kafka_bootstrap_servers=broker.bootstrap_servers,
                         startingOffsets="earliest")
    assert events.columns == ["card_id", "amount", "ts", "tags", "event_time", "kafka_key",
                              "kafka_topic", "kafka_partition", "kafka_offset",
                              "kafka_timestamp"]
    got: list[Any] = []
    _collect(events, tmp_path / "cp", got)
    assert sorted((r.card_id, r.amount, r.tags, r.event_time.astimezone(dt.UTC)) for r in got) == [
        ("c1", 12.5, ["a"], dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)),
        ("c2", 3.0, None, dt.datetime(2023, 11, 14, 22, 13, 21, tzinfo=dt.UTC)),
        ("c3", 99.0, None, dt.datetime(2023, 11, 14, 22, 13, 22, tzinfo=dt.UTC)),
    ]
    coords = {(r.kafka_partition, r.kafka_offset) for r in got}
    assert coords == set(placed[:len(GOOD)])

    dead = read_all(broker.bootstrap_servers, dlq)
    assert len(dead) == len(BAD)
    by_key = {m.key(): m for m in dead}
    for i, (raw, error) in enumerate(BAD):
        m = by_key[f"b{i}".encode()]
        headers = dict(m.headers())
        assert m.value() == raw
        assert error in headers["headrace.error"].decode()
        assert headers["headrace.source.topic"].decode() == topic_name
        p, o = placed[len(GOOD) + i]
        assert (int(headers["headrace.source.partition"]), int(headers["headrace.source.offset"])
                ) == (p, o)

    # A replayed micro-batch writes its dead letters once only.
    forget_last_commit(tmp_path / "cp")
    _collect(events, tmp_path / "cp", got)
    assert len(read_all(broker.bootstrap_servers, dlq)) == len(BAD)


def test_batch_read_events(spark: SparkSession, broker: EmbeddedBroker, topic_name: str) -> None:
    dlq = topic_name + "-dlq"
    produce(broker.bootstrap_servers, topic_name,
            [(None, json.dumps(GOOD[0]).encode()), (None, b"{")])
    df = read_events(spark, topic_name, SCHEMA, event_time="ts", dead_letter_topic=dlq,
                     streaming=False, kafka_bootstrap_servers=broker.bootstrap_servers)
    assert [r.card_id for r in df.collect()] == ["c1"]
    assert [m.value() for m in read_all(broker.bootstrap_servers, dlq)] == [b"{"]


@pytest.mark.parametrize(("schema", "event_time", "message"), [
    ("a string", "missing", "not in the schema"),
    ("a boolean", "a", "must be a timestamp"),
    ("kafka_offset long, t long", "t", "clash"),
])
def test_bad_event_options(spark: SparkSession, broker: EmbeddedBroker, schema: str,
                           event_time: str, message: str) -> None:
    with pytest.raises(Exception, match=message):
        read_events(spark, "t", schema, event_time=event_time, dead_letter_topic="d",
                    kafka_bootstrap_servers=broker.bootstrap_servers)


def test_flat_schema_events_read_in_bulk(spark: SparkSession, broker: EmbeddedBroker,
                                         topic_name: str) -> None:
    """A flat schema with epoch-ms event time is parsed a batch at a time; a partition of
    good records and a partition with bad ones among them give the same rows and dead
    letters as row-by-row parsing would."""
    dlq = topic_name + "-dlq"
    create_topic(broker.bootstrap_servers, topic_name, 2)
    good = [{"card_id": f"c{i}", "amount": i / 4, "ts": 1_700_000_000_000 + i, "n": i % 7}
            for i in range(300)]
    bad = [b'{"card_id": "x", "amount": 1, "ts": 1}{"card_id": "y", "amount": 1, "ts": 2}',
           b'{"card_id": "x", "amount": 1, "ts": 1.5}', b"   ",
           b'{"card_id": "x", "amount": 1, "ts": 1, "n": 99999999999}']
    rows: list[tuple[Any, ...]] = [(None, json.dumps(g).encode(), i % 2)
                                   for i, g in enumerate(good)]
    rows += [(f"b{i}".encode(), raw, 1) for i, raw in enumerate(bad)]
    produce(broker.bootstrap_servers, topic_name, rows)
    df = read_events(spark, topic_name, "card_id string not null, amount double, ts long, n int",
                     event_time="ts", dead_letter_topic=dlq, streaming=False,
                     kafka_bootstrap_servers=broker.bootstrap_servers)
    got = sorted((r.card_id, r.amount, r.n, r.event_time.astimezone(dt.UTC))
                 for r in df.collect())
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert got == sorted((g["card_id"], g["amount"], g["n"],
                          epoch + dt.timedelta(milliseconds=g["ts"])) for g in good)
    dead = {m.key(): m.value() for m in read_all(broker.bootstrap_servers, dlq)}
    assert dead == {f"b{i}".encode(): raw for i, raw in enumerate(bad)}
