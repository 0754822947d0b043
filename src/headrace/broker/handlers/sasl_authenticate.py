"""SaslAuthenticate (key 36), versions 0-2.

Runs the mechanism the handshake chose: PLAIN (one token; the password is checked
against the user's stored SCRAM credential, so no plaintext is kept anywhere) or
SCRAM-SHA-256/512 (two round trips, RFC 5802). Success authenticates the connection as
``User:<name>``; a failure answers SASL_AUTHENTICATION_FAILED, and the connection is
closed after the response, as Kafka does. ``session_lifetime_ms`` is 0: no
re-authentication is required (a client may still re-authenticate).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.broker.security.scram import (
    AuthenticationError,
    ScramServer,
    parse_plain,
    password_matches,
)
from headrace.protocol.errors import ErrorCode


def _answer(token: bytes = b"", error: str | None = None) -> Any:
    code = ErrorCode.SASL_AUTHENTICATION_FAILED if error else 0
    return SaslAuthenticateResponse(error_code=code, error_message=error, auth_bytes=token,
                                    session_lifetime_ms=0)


@handles(SaslAuthenticateRequest, SaslAuthenticateResponse, max_version=2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    session = ctx.session
    store = ctx.state.credentials
    mechanism = session.mechanism
    if mechanism is None:
        session.close_after = True
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                        error_message="SaslAuthenticate before SaslHandshake",
                                        auth_bytes=b"", session_lifetime_ms=0)
    token = bytes(request.auth_bytes or b"")
    try:
        if mechanism == "PLAIN":
            _authzid, user, password = parse_plain(token)
            if not any(password_matches(c, password) for c in store.any_for(user)):
                raise AuthenticationError("authentication failed: invalid credentials")
            session.principal, session.authenticated, session.mechanism = f"User:{user}", True, None
            return _answer()
        if session.scram is None:
            session.scram = ScramServer(mechanism, lambda u: store.lookup(u, mechanism))
            return _answer(session.scram.first(token))
        final = session.scram.final(token)
        session.principal = f"User:{session.scram.user}"
        session.authenticated, session.mechanism, session.scram = True, None, None
        return _answer(final)
    except AuthenticationError as e:
        session.scram = None
        session.close_after = True
        return _answer(error=f"Authentication failed during authentication due to invalid "
                             f"credentials with SASL mechanism {mechanism}: {e}")
