"""What a handler receives with each request."""

from __future__ import annotations

from dataclasses import dataclass

from headrace.broker.listeners import BoundListener
from headrace.broker.security.scram import ScramServer
from headrace.broker.state import BrokerState


@dataclass(frozen=True, slots=True)
class RequestContext:
    """``listener``: the one the request came in on (what Metadata advertises);
    ``session``: who the client is (its principal), shared by the connection's requests."""

    state: BrokerState
    api_version: int
    client_id: str | None
    peer: str
    listener: BoundListener
    session: Session


@dataclass(slots=True)
class Session:
    """Who is on a connection. ``authenticated`` is True from the start on listeners
    without SASL; a SASL exchange in progress keeps its mechanism and SCRAM state."""

    principal: str = "User:ANONYMOUS"
    authenticated: bool = True
    mechanism: str | None = None
    scram: ScramServer | None = None
    close_after: bool = False  # a failed authentication: close after this response
