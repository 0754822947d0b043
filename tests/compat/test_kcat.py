"""kcat (librdkafka's command-line client, Debian package) against the real broker.

``-P`` with ``-K`` key delimiter, ``-H`` headers, ``-Z`` nulls, ``-z`` codec, files as
single records; ``-C -J`` (kcat's simple consumer: assign, never a group) to check
content; ``-L`` metadata; ``-Q`` offsets by time. kcat is a text tool: records here are
UTF-8, without newlines, and cannot carry producer timestamps. kcat cannot create topics;
confluent-kafka's AdminClient does that.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headrace.testing import EmbeddedBroker
from tests.compat.clients import (
    confluent_produce,
    create_topic,
    kcat,
    kcat_consume,
    kcat_produce,
    kcat_produce_file,
)
from tests.compat.records import (
    BASE_TIMESTAMP_MS,
    CODECS,
    Record,
    assert_read_back,
    big_value,
    body,
    keyed_records,
    text_records,
)
from tests.compat.wire import CODEC_IDS, assert_stored_codec, stored_batches


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(broker: EmbeddedBroker, topic_name: str, codec: str) -> None:
    create_topic(broker.bootstrap_servers, topic_name, 3)
    records = text_records(3)

    kcat_produce(broker.bootstrap_servers, topic_name, records, codec)
    consumed = kcat_consume(broker.bootstrap_servers, topic_name)

    assert_read_back(records, consumed)
    assert_stored_codec(broker.bootstrap_servers, topic_name, range(3), codec)


@pytest.mark.parametrize("codec", CODECS)
def test_one_megabyte_value(
    broker: EmbeddedBroker, topic_name: str, codec: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap_servers, topic_name, 1)
    value = tmp_path / "value.bin"
    value.write_bytes(big_value())
    after = Record(b"after", body("after the big one"), (), 0)

    kcat_produce_file(broker.bootstrap_servers, topic_name, 0, b"big", str(value), codec)
    kcat_produce(broker.bootstrap_servers, topic_name, [after], codec)
    consumed = kcat_consume(broker.bootstrap_servers, topic_name)

    assert_read_back([Record(b"big", big_value(), (), 0), after], consumed)
    first = stored_batches(broker.bootstrap_servers, topic_name, 0)[0]
    assert (first.base_offset, first.record_count) == (0, 1)
    assert_stored_codec(broker.bootstrap_servers, topic_name, [0], codec)


def test_many_partitions_keep_per_partition_order(broker: EmbeddedBroker, topic_name: str) -> None:
    create_topic(broker.bootstrap_servers, topic_name, 32)
    # No -p: librdkafka's default partitioner hashes the keys (-K) over the 32 partitions.
    records = [Record(r.key, r.value) for r in keyed_records(640, keys=320)]

    kcat_produce(broker.bootstrap_servers, topic_name, records, "zstd")
    consumed = kcat_consume(broker.bootstrap_servers, topic_name)

    assert_read_back(records, consumed)
    assert {c.partition for c in consumed} == set(range(32))


def test_lz4_batches_are_compressed(broker: EmbeddedBroker, topic_name: str) -> None:
    create_topic(broker.bootstrap_servers, topic_name, 1)
    kcat_produce(
        broker.bootstrap_servers,
        topic_name,
        [Record(None, body(str(i)) * 5, (), 0) for i in range(10)],
        "lz4",
    )

    # however the client split them (a busy machine can end its linger early), every
    # stored batch is lz4 and together they hold the ten records
    batches = stored_batches(broker.bootstrap_servers, topic_name, 0)
    assert batches and {b.compression_type for b in batches} == {CODEC_IDS["lz4"]}
    assert sum(b.record_count for b in batches) == 10


def test_metadata_listing(broker: EmbeddedBroker, topic_name: str) -> None:
    create_topic(broker.bootstrap_servers, topic_name, 4)

    listing = json.loads(kcat("-L", "-b", broker.bootstrap_servers, "-t", topic_name, "-J"))

    assert listing["controllerid"] == 0
    assert listing["brokers"] == [{"id": 0, "name": broker.bootstrap_servers}]
    (topic,) = listing["topics"]
    assert topic["topic"] == topic_name
    assert [
        (p["partition"], p["leader"], p["replicas"], p["isrs"]) for p in topic["partitions"]
    ] == [(p, 0, [{"id": 0}], [{"id": 0}]) for p in range(4)]


def test_query_offsets_and_consume_by_time(broker: EmbeddedBroker, topic_name: str) -> None:
    create_topic(broker.bootstrap_servers, topic_name, 1)
    stamps = [BASE_TIMESTAMP_MS + 1000 * i for i in range(5)]
    for i, ts in enumerate(stamps):  # kcat cannot set timestamps: one batch each
        confluent_produce(
            broker.bootstrap_servers, topic_name, [Record(None, f"v{i}".encode(), (), 0, ts)]
        )

    def query(timestamp: int) -> str:
        spec = f"{topic_name}:0:{timestamp}"
        return kcat("-Q", "-b", broker.bootstrap_servers, "-t", spec).decode().strip()

    assert query(-2) == f"{topic_name} [0] offset 0"
    assert query(-1) == f"{topic_name} [0] offset 5"
    assert query(stamps[2]) == f"{topic_name} [0] offset 2"
    assert query(stamps[2] + 1) == f"{topic_name} [0] offset 3"
    assert query(stamps[-1] + 1) == f"{topic_name} [0] offset -1"

    window = kcat(
        "-C",
        "-b",
        broker.bootstrap_servers,
        "-t",
        topic_name,
        "-e",
        "-o",
        f"s@{stamps[1]}",
        "-o",
        f"e@{stamps[4]}",
        "-f",
        "%o:%s:%T\n",
    )
    assert window.decode().splitlines() == [f"{i}:v{i}:{stamps[i]}" for i in (1, 2, 3)]
    from_offset = kcat(
        "-C",
        "-b",
        broker.bootstrap_servers,
        "-t",
        topic_name,
        "-p",
        "0",
        "-o",
        "3",
        "-c",
        "2",
        "-f",
        "%o:%s\n",
    )
    assert from_offset.decode().splitlines() == ["3:v3", "4:v4"]
