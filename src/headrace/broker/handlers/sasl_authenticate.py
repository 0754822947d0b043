"""SaslAuthenticate (key 36), versions 0-2.

Runs the mechanism the handshake chose: PLAIN (one token; the password is checked
against the user's stored SCRAM credential, so no plaintext is kept anywhere) or
SCRAM-SHA-256/512 (two round trips, RFC 5802). Success authenticates the connection as
``User:<name>``; a failure answers SASL_AUTHENTICATION_FAILED, and the connection is
closed after the response, as Kafka does. Re-authentication (KIP-368): with
``connections.max.reauth.ms`` set, a v1+ login answers that ``session_lifetime_ms`` and
the connection serves nothing but a new login once it passed (``connection``); a
re-authentication must keep the principal (else SASL_AUTHENTICATION_FAILED, then closed).
An authorization id (PLAIN's, SCRAM's ``a=``) other than the user name is refused with
Kafka's message, "Authentication failed: Client requested an authorization id that is
different from username"; other failures with Kafka's generic "invalid credentials" one.
Without it (0, the default) a login lasts as long as the connection.
"""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.broker.security.scram import (
    AuthenticationError,
    AuthorizationIdError,
    ScramServer,
    parse_plain,
    password_matches,
)
from headrace.protocol.errors import ErrorCode


def _answer(token: bytes = b"", error: str | None = None) -> Any:
    code = ErrorCode.SASL_AUTHENTICATION_FAILED if error else 0
    return SaslAuthenticateResponse(error_code=code, error_message=error, auth_bytes=token,
                                    session_lifetime_ms=0)


def _logged_in(ctx: RequestContext, user: str, token: bytes) -> Any:
    """Authenticate the connection as ``user`` and answer ``token``; a re-authentication
    as someone else fails."""
    session = ctx.session
    principal = f"User:{user}"
    if session.authenticated and session.principal != principal:  # (SASL listeners only)
        raise AuthenticationError(f"re-authentication as {principal} on a connection of "
                                  f"{session.principal}")
    session.principal, session.authenticated = principal, True
    session.mechanism = session.scram = None
    response = _answer(token)
    lifetime = ctx.state.config.connections_max_reauth_ms
    if lifetime > 0 and ctx.api_version >= 1:
        session.expires_at = time.monotonic() + lifetime / 1000
        response.session_lifetime_ms = lifetime
    return response


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
            return _logged_in(ctx, user, b"")
        if session.scram is None:
            session.scram = ScramServer(mechanism, lambda u: store.lookup(u, mechanism))
            return _answer(session.scram.first(token))
        final = session.scram.final(token)
        return _logged_in(ctx, session.scram.user, final)
    except AuthenticationError as e:
        session.scram = None
        session.close_after = True
        if isinstance(e, AuthorizationIdError):
            return _answer(error=str(e))
        return _answer(error=f"Authentication failed during authentication due to invalid "
                             f"credentials with SASL mechanism {mechanism}: {e}")
