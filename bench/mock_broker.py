"""librdkafka's mock cluster (one broker), kept alive as a separate process.

``python bench/mock_broker.py`` prints ``PORT <n>`` once the mock broker listens, then reads
commands, one a line, on its standard input:

    CREATE <topic> <partitions>     ->  "OK" or "ERROR <reason>"

and exits when its standard input closes (or on SIGTERM/SIGINT).

The mock broker does not speak CreateTopics (it is not in its ApiVersions answer), and
auto-creates topics with its default of 4 partitions, so topics are created here through
librdkafka's C mock API (``rd_kafka_mock_topic_create``), called with ctypes on the same
librdkafka that the confluent-kafka wheel bundles. The cluster is made with
``rd_kafka_mock_cluster_new`` on a plain producer handle and its address comes from
``rd_kafka_mock_cluster_bootstraps``. (The other way in, a client configured with
``test.mock.num.brokers=1`` and ``debug=mock``, announces the port in the log line
"... replaced with 127.0.0.1:PORT", but the debug context then logs every request the mock
serves — a cost the loads would pay — and leaves no way to create a 6-partition topic.
``--via-log`` runs that way, for checking.)

The mock keeps only about 5 MB per partition (older segments are dropped), so large
reads from it are not meaningful.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import logging
import os
import re
import signal
import sys
import time


def librdkafka_path() -> str:
    import confluent_kafka
    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    found = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    if not found:
        raise RuntimeError("the confluent-kafka wheel's bundled librdkafka was not found")
    return found[0]


class MockCluster:
    def __init__(self) -> None:
        lib = ctypes.CDLL(librdkafka_path())
        lib.rd_kafka_conf_new.restype = ctypes.c_void_p
        lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_new.restype = ctypes.c_void_p
        lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
        lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
        lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_err2str.restype = ctypes.c_char_p
        lib.rd_kafka_err2str.argtypes = [ctypes.c_int]
        self.lib = lib
        err = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", err, len(err))  # no "no bootstrap.servers" notice
        self.rk = lib.rd_kafka_new(0, conf, err, len(err))  # 0 = RD_KAFKA_PRODUCER
        if not self.rk:
            raise RuntimeError(f"rd_kafka_new: {err.value.decode()}")
        self.mc = lib.rd_kafka_mock_cluster_new(self.rk, 1)
        if not self.mc:
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstraps = lib.rd_kafka_mock_cluster_bootstraps(self.mc).decode()

    def create_topic(self, name: str, partitions: int) -> str | None:
        code = self.lib.rd_kafka_mock_topic_create(self.mc, name.encode(), partitions, 1)
        return None if code == 0 else self.lib.rd_kafka_err2str(code).decode()


def via_log() -> int:
    from confluent_kafka import Producer
    port: list[int] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            m = re.search(r"replaced with 127\.0\.0\.1:(\d+)", record.getMessage())
            if m and not port:
                port.append(int(m.group(1)))

    logger = logging.getLogger("mock")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Grab())
    logger.propagate = False
    instance = Producer({"test.mock.num.brokers": "1", "bootstrap.servers": "x:1", "debug": "mock",
                         "logger": logger})
    deadline = time.time() + 10
    while not port and time.time() < deadline:
        instance.poll(0.05)
    if not port:
        print("ERROR mock cluster port not found in the log", flush=True)
        return 1
    print(f"PORT {port[0]}", flush=True)
    for _ in sys.stdin:
        print("ERROR topics can't be created in --via-log mode", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="librdkafka mock cluster as a process")
    parser.add_argument("--via-log", action="store_true",
                        help="start it with test.mock.num.brokers + debug=mock and parse the port from the log")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if args.via_log:
        return via_log()
    try:
        cluster = MockCluster()
    except Exception as e:  # noqa: BLE001
        print(f"ERROR {e}", flush=True)
        return 1
    print(f"PORT {cluster.bootstraps.rsplit(':', 1)[1]}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if len(words) == 3 and words[0] == "CREATE":
            problem = cluster.create_topic(words[1], int(words[2]))
            print("OK" if problem is None else f"ERROR {problem}", flush=True)
        elif words:
            print(f"ERROR unknown command {line.strip()!r}", flush=True)
    os._exit(0)  # skip librdkafka's teardown: nothing to flush


if __name__ == "__main__":
    sys.exit(main())
