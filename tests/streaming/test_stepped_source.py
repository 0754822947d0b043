"""The stepped source's hand-over of a step, called as Spark calls a query's sources (no
Spark application: the readers are driven directly, against the session's broker)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql.streaming.datasource import ReadAllAvailable

from headrace.spark import metadata
from headrace.spark.options import parse_source_options
from headrace.testing import EmbeddedBroker
from tests.spark.kafka_helpers import create_topic, produce
from tests.streaming.stepped_source import SteppedReader, new_run, write_cap


def test_every_source_of_a_trigger_reads_the_same_step(broker: EmbeddedBroker,
                                                        topic_name: str,
                                                        tmp_path: Path) -> None:
    """Spark asks a query's sources for their latest offsets one after the other, in the
    same order at every trigger. A step handed over between two of those calls is read by
    every source at the next trigger, not by the later sources at this one (which split a
    step across two micro-batches: table_join then emitted a half-applied step's rows)."""
    topics = [f"{topic_name}-a", f"{topic_name}-b"]
    cap = tmp_path / "steps.json"
    readers = []
    for t in topics:
        create_topic(broker.bootstrap_servers, t)
        readers.append(SteppedReader(parse_source_options(
            {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": t,
             "startingOffsets": "earliest"}, streaming=True), cap))
    new_run(cap)
    write_cap(cap, {})

    def trigger(between: dict[tuple[str, int], int] | None = None) -> list[int]:
        ends = []
        for i, (reader, t) in enumerate(zip(readers, topics, strict=True)):
            if i == 1 and between is not None:
                write_cap(cap, between)
            end = reader.latestOffset(metadata.to_json({(t, 0): 0}), ReadAllAvailable())
            ends.append(end[t]["0"])
        return ends

    assert trigger() == [0, 0]
    for t in topics:
        produce(broker.bootstrap_servers, t, [(b"k", b"v")] * 3)
    assert trigger() == [0, 0]  # produced, not handed over
    assert trigger(between={(t, 0): 3 for t in topics}) == [0, 0]
    assert trigger() == [3, 3]
    for reader in readers:
        reader.stop()
