"""Produce with one client, consume with another: every ordered pair of the four.

Each pair uses a different codec (rotating through all five), so a batch compressed by
one client's codec library is decompressed by another's after a verbatim trip through the
broker. The records are the edge cases both sides can express: kcat on either side means
text records; a kcat producer sets no timestamps; kafka-python sends no None header values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import permutations

import pytest

from headrace.testing import EmbeddedBroker
from tests.compat.clients import (
    aiokafka_consume,
    aiokafka_produce,
    confluent_consume,
    confluent_produce,
    create_topic,
    kafka_python_consume,
    kafka_python_produce,
    kcat_consume,
    kcat_produce,
)
from tests.compat.records import (
    CODECS,
    Consumed,
    Delivered,
    Record,
    assert_read_back,
    sample_records,
    text_records,
    without_null_header_values,
)
from tests.compat.wire import assert_stored_codec

Produce = Callable[[str, str, Sequence[Record], str], "list[Delivered] | None"]
Consume = Callable[[str, str, Iterable[int]], list[Consumed]]

PRODUCERS: dict[str, Produce] = {
    "confluent": confluent_produce,
    "kafka-python": kafka_python_produce,
    "aiokafka": aiokafka_produce,
    "kcat": kcat_produce,
}
CONSUMERS: dict[str, Consume] = {
    "confluent": confluent_consume,
    "kafka-python": kafka_python_consume,
    "aiokafka": aiokafka_consume,
    "kcat": kcat_consume,
}
PAIRS = [
    (producer, consumer, CODECS[i % len(CODECS)])
    for i, (producer, consumer) in enumerate(permutations(PRODUCERS, 2))
]


def records_for(producer: str, consumer: str) -> list[Record]:
    if "kcat" in (producer, consumer):
        records = text_records(3, timestamps=producer != "kcat")
    else:
        records = sample_records(3)
    if producer == "kafka-python":
        records = without_null_header_values(records)
    return records


@pytest.mark.parametrize(
    ("producer", "consumer", "codec"), PAIRS, ids=[f"{p}->{c}-{codec}" for p, c, codec in PAIRS]
)
def test_produce_with_one_consume_with_another(
    broker: EmbeddedBroker, topic_name: str, producer: str, consumer: str, codec: str
) -> None:
    create_topic(broker.bootstrap_servers, topic_name, 3)
    records = records_for(producer, consumer)

    delivered = PRODUCERS[producer](broker.bootstrap_servers, topic_name, records, codec)
    consumed = CONSUMERS[consumer](broker.bootstrap_servers, topic_name, range(3))

    assert_read_back(records, consumed, delivered)
    assert_stored_codec(
        broker.bootstrap_servers, topic_name, range(3), codec)
