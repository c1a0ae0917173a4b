"""SaslHandshake (17) and SaslAuthenticate (36): SASL on SASL_PLAINTEXT and SASL_SSL listeners,
re-authentication included (KIP-368: ``session_lifetime_ms``). Both drive the connection's
:class:`~samsa.server.security.SaslSession`; on a failure the session has logged one line with
the client's address, and the dispatcher answers after ``connection.failed.authentication.delay.ms``
and closes the connection (KIP-306)."""

from __future__ import annotations

import asyncio

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles


@handles(ApiKey.SASL_HANDSHAKE)
def sasl_handshake(ctx, req: dict) -> dict:
    auth = ctx.connection.auth
    if auth is None:  # not a SASL listener
        return {"error_code": errors.E_ILLEGAL_SASL_STATE, "mechanisms": []}
    return {"error_code": auth.handshake(req["mechanism"], ctx.version), "mechanisms": list(auth.security.mechanisms)}


@handles(ApiKey.SASL_AUTHENTICATE)
def sasl_authenticate(ctx, req: dict) -> dict:
    conn = ctx.connection
    auth = conn.auth
    if auth is None:  # not a SASL listener
        asyncio.get_running_loop().call_soon(conn.close, "SaslAuthenticate out of order", True)
        return {"error_code": errors.E_ILLEGAL_SASL_STATE, "error_message": "SaslAuthenticate before SaslHandshake",
                "auth_bytes": b"", "session_lifetime_ms": 0}
    error, reply, lifetime = auth.authenticate(req["auth_bytes"])
    return {"error_code": error, "error_message": auth.failure if error else None, "auth_bytes": reply,
            "session_lifetime_ms": lifetime}
