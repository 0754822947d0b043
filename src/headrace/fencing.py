"""One writer identity shared by several processes: a fenced transactional producer.

Used by the schema registry (``_schemas``) and the event store (one identity per
partition): whoever calls ``fenced_producer`` last is the only one whose writes the broker
accepts; the others' next write or commit fails with PRODUCER_FENCED before anything of it
is visible. Kafka's transaction APIs are all it needs, so it holds on any broker.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer


def fenced_producer(config: dict[str, Any], transactional_id: str, timeout: float) -> Producer:
    """A producer of ``transactional_id`` after ``init_transactions``: the producer epoch is
    bumped (fencing every earlier producer of the id) and the id's transaction left open or
    in flight is completed (aborted, or its commit finished) before this returns. Blocks up
    to ``timeout`` s; raises ``KafkaException`` on failure."""
    producer = Producer({**config, "transactional.id": transactional_id,
                         "enable.idempotence": True, "acks": "all", "linger.ms": 0,
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(timeout)
    return producer
