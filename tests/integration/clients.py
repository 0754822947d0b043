"""Small helpers around real Kafka clients, shared by integration tests."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from headrace.testing import scaled


def consume_all(bootstrap: str, partitions: list[TopicPartition],
                timeout: float = 30.0) -> dict[int, list[tuple[int, bytes]]]:
    """Read every record up to each partition's current end with librdkafka (manual
    assignment, no group). Returns partition -> [(offset, value)]. Any consumer error fails."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "consume-all",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=scaled(10))[1]
                for tp in partitions}
        consumer.assign(partitions)
        out: dict[int, list[tuple[int, bytes]]] = {tp.partition: [] for tp in partitions}
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + scaled(timeout)
        while len(done) < len(partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {[len(v) for v in out.values()]} of {ends}")
            for msg in consumer.consume(10_000, 0.5):
                err = msg.error()
                p = msg.partition()
                assert p is not None
                if err is not None:
                    if err.code() == err._PARTITION_EOF:
                        if len(out[p]) >= ends[p] or (out[p] and out[p][-1][0] + 1 >= ends[p]):
                            done.add(p)
                        continue
                    raise AssertionError(f"consumer error: {err}")
                offset, value = msg.offset(), msg.value()
                assert offset is not None and value is not None
                out[p].append((offset, value))
                if offset + 1 >= ends[p]:
                    done.add(p)
        return out
    finally:
        consumer.close()
