"""Kafka messages kafka-python's codec has no spec for, built by its own JSON loader.

The ``*.json`` files beside this module are Apache Kafka's message specs (fields and
versions only); ``kafka.protocol``'s metaclass reads them by class name from this package,
so these classes encode and decode exactly like the codec's generated ones.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.api_message import ApiMessage


def _message(name: str) -> Any:
    """The codec class for ``name``, from ``name.json`` in this package (what a
    ``class Name(ApiMessage, load_json=...)`` statement would build)."""
    attrs = {"__module__": __name__, "__qualname__": name}
    return type(ApiMessage)(name, (ApiMessage,), attrs, load_json=__name__)


ConsumerGroupHeartbeatRequest = _message("ConsumerGroupHeartbeatRequest")
ConsumerGroupHeartbeatResponse = _message("ConsumerGroupHeartbeatResponse")
ConsumerGroupDescribeRequest = _message("ConsumerGroupDescribeRequest")
ConsumerGroupDescribeResponse = _message("ConsumerGroupDescribeResponse")

__all__ = [
    "ConsumerGroupDescribeRequest", "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse",
]
