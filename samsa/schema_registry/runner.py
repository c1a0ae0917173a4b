"""The ``samsa schema-registry`` process: read the store, join the election, serve REST until
SIGTERM/SIGINT, then leave the group (so another process is elected at once) and stop."""

from __future__ import annotations

import logging
import socket
import sys

from samsa.schema_registry.app import Service, create_app
from samsa.schema_registry.config import client_config, identity, listener_address
from samsa.schema_registry.election import LeaderElector
from samsa.schema_registry.metrics import RegistryMetrics
from samsa.schema_registry.registry import Registry
from samsa.schema_registry.store import KafkaStore

log = logging.getLogger("samsa.schema_registry")


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    for noisy in ("samsa.client", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def serve(config: dict[str, str]) -> int:
    import uvicorn

    host, port = listener_address(config["listeners"])
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))       # port 0: an ephemeral port, announced below
    port = sock.getsockname()[1]
    clients = client_config(config)
    store = KafkaStore(clients, config["kafkastore.topic"], int(config["kafkastore.topic.replication.factor"]),
                       int(config["kafkastore.timeout.ms"]), int(config["kafkastore.init.timeout.ms"]))
    store.start()
    registry = Registry(store, config["schema.compatibility.level"])
    metrics = RegistryMetrics(registry)
    service = Service(registry, metrics)
    me = identity(config, port)
    elector = LeaderElector(clients, config["schema.registry.group.id"], me, service.became,
                            int(config["schema.registry.group.session.timeout.ms"]))
    elector.start()
    log.info("Schema registry listening on http://%s:%d (kafkastore %s, topic %s)", host, port,
             clients["bootstrap.servers"], config["kafkastore.topic"])
    print(f"Server started, listening for requests at http://{me['host']}:{port}", file=sys.stderr, flush=True)
    try:
        server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning", lifespan="off"))
        server.run(sockets=[sock])
    finally:
        elector.stop()
        store.close()
        log.info("Schema registry stopped")
    return 0
