"""SaslHandshake (key 17), versions 0-1.

v1 picks the mechanism for the SaslAuthenticate requests that follow: PLAIN,
SCRAM-SHA-256 or SCRAM-SHA-512 (``sasl.enabled.mechanisms``); another one gets
UNSUPPORTED_SASL_MECHANISM with the list. A handshake on an authenticated connection
starts a re-authentication (KIP-368). Not implemented: v0's raw SASL tokens without Kafka
framing (every current client uses v1): answered UNSUPPORTED_VERSION. On a listener
without SASL: ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.errors import ErrorCode


@handles(SaslHandshakeRequest, SaslHandshakeResponse, max_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    enabled = list(ctx.state.config.sasl_enabled_mechanisms)
    if not ctx.listener.uses_sasl:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    if ctx.api_version == 0:
        return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, mechanisms=enabled)
    if request.mechanism not in enabled:
        return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                     mechanisms=enabled)
    ctx.session.mechanism = request.mechanism
    ctx.session.scram = None
    return SaslHandshakeResponse(error_code=0, mechanisms=enabled)
