"""``/metrics`` over HTTP, served on the broker's own event loop.

Serving on the loop (not on prometheus_client's WSGI thread) means a scrape reads the
broker's partitions, groups and counters between two requests, never while one is half
handled. The exposition itself is prometheus_client's (``choose_encoder``: the Prometheus text
format, or OpenMetrics when the scraper asks for it).
"""

from __future__ import annotations

import asyncio
import logging
import re

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)

LISTENER = re.compile(r"http://(\[[0-9a-fA-F:]+\]|[^:/\s\[\]]*):(\d+)/?")
_READ_TIMEOUT_S = 10.0
_MAX_HEAD = 16384


def parse_listener(value: str) -> tuple[str, int]:
    """``http://host:port`` -> (host, port); an empty host means every interface."""
    m = LISTENER.fullmatch(value)
    if m is None:
        raise ValueError(f"prometheus.listener must look like http://host:port, not {value!r}")
    return m.group(1).strip("[]"), int(m.group(2))


class MetricsEndpoint:
    def __init__(self, registry: CollectorRegistry, listener: str):
        self.registry = registry
        self.host, self.port = parse_listener(listener)
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host or None, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("serving Prometheus metrics on http://%s:%d/metrics", self.host or "0.0.0.0", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            status, content_type, body = self._answer(head[:_MAX_HEAD].decode("latin-1"))
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode("latin-1") + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            pass
        except Exception:  # noqa: BLE001 - a collector bug must not take the broker down
            log.exception("answering a metrics request failed")
        finally:
            writer.close()

    def _answer(self, head: str) -> tuple[str, str, bytes]:
        request_line, *header_lines = head.split("\r\n")
        parts = request_line.split()
        if len(parts) != 3:
            return "400 Bad Request", "text/plain", b"bad request line\n"
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET\n"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            headers = dict(line.split(":", 1) for line in header_lines if ":" in line)
            accept = next((v.strip() for k, v in headers.items() if k.strip().lower() == "accept"), None)
            encoder, content_type = choose_encoder(accept)
            body = encoder(self.registry)
            return "200 OK", content_type, b"" if method == "HEAD" else body
        if path == "/":
            return "200 OK", "text/html", b'<html><body><a href="/metrics">/metrics</a></body></html>\n'
        return "404 Not Found", "text/plain", b"not found: try /metrics\n"
