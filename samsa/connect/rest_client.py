"""Requests from one worker to another's REST API (a follower forwarding to the leader)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

TIMEOUT = 90.0  # Kafka's REST request timeout


def request(method: str, url: str, body: Any = None, *, raw: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, JSON body or None); an error status is an answer too. OSError if the worker cannot be reached.

    ``raw``: the body's bytes as they must be sent (a signed request); else ``body`` as JSON."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Accept": "application/json",
                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            answer = resp.read()
            status = resp.status
    except urllib.error.HTTPError as e:
        answer, status = e.read(), e.code
    try:
        return status, json.loads(answer) if answer else None
    except ValueError:
        return status, {"error_code": status, "message": answer.decode(errors="replace")}
