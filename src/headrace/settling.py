"""Admin reads of a topic just created, on one broker or a cluster.

Kafka's brokers learn a new topic from the controller asynchronously: for a moment a
broker answers UNKNOWN_TOPIC_OR_PART for a topic that exists, and a broker that is going
away times out. The schema registry (``_schemas``) and the event store create their topic
and check it straight after; both read it through here.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource


def topic_configs(admin: AdminClient, topic: str, timeout: float) -> dict[str, Any]:
    """``topic``'s configs (name -> ``ConfigEntry``). Retries UNKNOWN_TOPIC_OR_PART,
    timeouts, transport and retriable errors until ``timeout`` s have passed, then raises
    the last ``KafkaException``; any other error at once. Blocks."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    deadline = time.monotonic() + timeout
    while True:
        try:
            found: dict[str, Any] = admin.describe_configs([resource])[resource].result(timeout)
            return found
        except KafkaException as e:
            err = e.args[0]
            transient = err.retriable() or err.code() in (
                KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
            if not transient or time.monotonic() >= deadline:
                raise
        time.sleep(0.1)
