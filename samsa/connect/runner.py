"""Running a worker process: logging, the herder, the REST server, a clean stop on SIGTERM."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
from typing import Callable

from samsa.connect.herder import Herder
from samsa.connect.rest import create_app, listener_address

log = logging.getLogger("samsa.connect")


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    for noisy in ("samsa.client", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def worker_id(listeners: str, advertised_host: str | None, advertised_port: str | None) -> str:
    host, port = listener_address(listeners)
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"{advertised_host or host}:{advertised_port or port}"


def _server_class() -> type:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn raises SIGTERM again after its shutdown, which would kill the process before the
        herder stops its tasks (and stores their offsets): here a signal only ends serving."""

        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[override]
            previous = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
    return Server


def serve(herder: Herder, listeners: str, after_start: Callable[[], None] | None = None) -> int:
    """Start the herder, serve REST until SIGTERM/SIGINT, then stop everything cleanly."""
    import uvicorn

    host, port = listener_address(listeners)
    _Server = _server_class()
    herder.start()
    try:
        if after_start is not None:
            after_start()
        config = uvicorn.Config(create_app(herder), host=host, port=port, log_level="warning", lifespan="off")
        server = _Server(config)
        log.info("REST server listening at http://%s:%d/, advertising URL http://%s/", host, port,
                 herder.worker.worker_id)
        server.run()
    finally:
        log.info("Kafka Connect stopping")
        herder.stop()
        log.info("Kafka Connect stopped")
    return 0
