"""Running a broker as a process: logging, signals, foreground or daemon."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from samsa.server import kraft_mode
from samsa.server.broker import BrokerServer
from samsa.broker_config import BrokerConfig
from samsa.storage.dir_lock import LogDirLockedError

log = logging.getLogger("samsa")

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"


def setup_logging(log_file: Path | None = None, level: str | None = None) -> None:
    handler: logging.Handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level or os.environ.get("SAMSA_LOG_LEVEL", "INFO"))


async def serve(config: BrokerConfig, ready_message: str | None = None) -> None:
    if kraft_mode.controller_only(config):
        from samsa.server.controller_node import ControllerServer
        broker: BrokerServer | ControllerServer = ControllerServer(config)
    else:
        broker = BrokerServer(config)
    await broker.start()
    if ready_message:
        print(ready_message.format(broker=broker), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("[KafkaServer id=%d] shutting down", broker.broker_id)
    await broker.stop()


def run(config: BrokerConfig, *, daemon: bool = False, ready_message: str | None = None) -> int:
    kraft_mode.check_start(config)  # before -daemon detaches: a refused KRaft node says so on the terminal
    if daemon:
        log_dir = Path(os.environ.get("LOG_DIR", "logs"))
        log_dir.mkdir(parents=True, exist_ok=True)
        if os.fork() > 0:
            return 0
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        setup_logging(log_dir / "server.log")
    else:
        setup_logging()
    from samsa.cluster.zookeeper import ZooKeeperError
    try:
        run_loop(serve(config, ready_message))
    except (OSError, ZooKeeperError, LogDirLockedError) as e:
        log.error("broker failed to start: %s", e)
        return 1
    return 0


def run_loop(main) -> None:
    """Run the broker on asyncio's default event loop, or on uvloop (libuv) when the environment
    says ``SAMSA_EVENT_LOOP=uvloop`` and it is installed (``pip install uvloop``); a missing uvloop
    is a log line and the default loop. BENCHMARKS.md has the comparison of the two."""
    if os.environ.get("SAMSA_EVENT_LOOP", "asyncio").lower() == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("SAMSA_EVENT_LOOP=uvloop but uvloop is not installed: running on asyncio's loop")
        else:
            log.info("running on uvloop %s", uvloop.__version__)
            uvloop.run(main)
            return
    asyncio.run(main)
