"""SaslHandshake (17) and SaslAuthenticate (36): SASL on SASL_PLAINTEXT and SASL_SSL listeners,
re-authentication included (KIP-368: ``session_lifetime_ms``). A failure answers
SASL_AUTHENTICATION_FAILED with its message, logs one line with the client's address and
closes the connection once the answer is out."""

from __future__ import annotations

import asyncio
import logging

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.security.sasl import SaslAuthenticationError
from samsa.server.handlers import handles
from samsa.server.security import log_failure

log = logging.getLogger("samsa.server.authentication")


def _close_after_answer(conn, reason: str) -> None:
    asyncio.get_running_loop().call_soon(conn.close, reason, True)


@handles(ApiKey.SASL_HANDSHAKE)
def sasl_handshake(ctx, req: dict) -> dict:
    conn = ctx.connection
    auth = conn.auth
    if auth is None:
        return {"error_code": errors.E_ILLEGAL_SASL_STATE, "mechanisms": []}
    mechanisms = list(auth.security.mechanisms)
    if not auth.handshake(req["mechanism"].upper(), ctx.version):
        log_failure(conn.peer, f"Unsupported SASL mechanism {req['mechanism']}")
        _close_after_answer(conn, "unsupported SASL mechanism")
        return {"error_code": errors.E_UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}
    return {"error_code": 0, "mechanisms": mechanisms}


@handles(ApiKey.SASL_AUTHENTICATE)
def sasl_authenticate(ctx, req: dict) -> dict:
    conn = ctx.connection
    auth = conn.auth
    if auth is None or auth.mechanism is None:
        _close_after_answer(conn, "SaslAuthenticate out of order")
        return {"error_code": errors.E_ILLEGAL_SASL_STATE, "error_message": "SaslAuthenticate before SaslHandshake",
                "auth_bytes": b"", "session_lifetime_ms": 0}
    mechanism = auth.mechanism_name
    again = auth.authenticated  # KIP-368: a re-authentication of an open session
    try:
        reply, lifetime = auth.authenticate(req["auth_bytes"])
    except SaslAuthenticationError as e:
        log_failure(conn.peer, str(e), mechanism)
        _close_after_answer(conn, str(e))
        return {"error_code": errors.E_SASL_AUTHENTICATION_FAILED, "error_message": str(e), "auth_bytes": b"",
                "session_lifetime_ms": 0}
    if auth.authenticated:
        conn.principal = auth.principal
        if again and auth.mechanism is None:
            log.info("Re-authenticated %s with /%s [mechanism %s], session lifetime %d ms", auth.principal,
                     conn.peer.rsplit(":", 1)[0], mechanism, lifetime)
    return {"error_code": 0, "error_message": None, "auth_bytes": reply, "session_lifetime_ms": lifetime}
