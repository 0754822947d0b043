"""What a handler receives with each request."""

from __future__ import annotations

from dataclasses import dataclass

from headrace.broker.listeners import BoundListener
from headrace.broker.state import BrokerState


@dataclass(frozen=True, slots=True)
class RequestContext:
    """``listener``: the one the request came in on (what Metadata advertises);
    ``principal``: who the client is (``User:ANONYMOUS`` on PLAINTEXT)."""

    state: BrokerState
    api_version: int
    client_id: str | None
    peer: str
    listener: BoundListener
    principal: str = "User:ANONYMOUS"
