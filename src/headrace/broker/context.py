"""What a handler receives with each request."""

from __future__ import annotations

from dataclasses import dataclass

from headrace.broker.state import BrokerState


@dataclass(frozen=True, slots=True)
class RequestContext:
    state: BrokerState
    api_version: int
    client_id: str | None
    peer: str
