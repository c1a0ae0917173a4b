"""Apache Kafka itself (the jars `tests/kafka/pom.xml` fetches) as a reference broker.

One implementation for the differential tests' session fixture and for `bench/`: storage is
formatted first (KRaft, each node a combined broker and controller), then `kafka.Kafka` runs in
a child JVM with Kafka's usual heap, on free loopback ports, in a temporary directory, and is
stopped by its pid. Kafka's tools run the same way (:func:`run_tool`, their main classes).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

from broker_process import ChildProcess

ROOT = Path(__file__).resolve().parent.parent
POM_DIR = ROOT / "tests" / "kafka"
LIBS = POM_DIR / ".libs"
KAFKA_VERSION = "4.4.0"
# Kafka's connect-file and connect-mirror with their own dependencies, at 4.3.0: their 4.4.0 jars are not served by
# the Maven Central reachable here, and 4.3.0's do not run on 4.4.0's class path (tests/kafka/connect-4.3.0/pom.xml).
CONNECT_PLUGINS_VERSION = "4.3.0"
CONNECT_PLUGIN_PATH = POM_DIR / "connect-4.3.0" / ".libs"          # a Connect worker's plugin.path
CONNECT_PLUGINS = CONNECT_PLUGIN_PATH / f"kafka-connect-{CONNECT_PLUGINS_VERSION}"

# Kafka's kafka-server-start.sh: KAFKA_HEAP_OPTS="-Xmx1G -Xms1G", and kafka-run-class.sh's G1 options.
SERVER_JVM = ["-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
              "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
              "-Djava.awt.headless=true"]
# kafka-run-class.sh's default for the tools: -Xmx256M. Tiered compilation stopped at C1 starts them faster.
TOOL_JVM = ["-Xmx256M", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto",
            "-Djava.awt.headless=true"]

LOG4J2 = """Configuration:
  Appenders:
    File:
      name: file
      fileName: "{path}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: {level}
      AppenderRef:
        - ref: file
"""
TOOLS_LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: stderr
      target: SYSTEM_ERR
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: ERROR
      AppenderRef:
        - ref: stderr
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_jars() -> Path:
    """Kafka's jars in tests/kafka/.libs (and connect-4.3.0/.libs), fetched by Maven if they are not there yet."""
    wanted = [LIBS / f"kafka_2.13-{KAFKA_VERSION}.jar", LIBS / f"kafka-streams-{KAFKA_VERSION}.jar",
              CONNECT_PLUGINS / f"connect-mirror-{CONNECT_PLUGINS_VERSION}.jar",
              CONNECT_PLUGINS / f"kafka-shell-{CONNECT_PLUGINS_VERSION}.jar"]
    if not all(jar.exists() for jar in wanted):
        subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies"], cwd=POM_DIR, check=True)
    return LIBS


def available() -> bool:
    return shutil.which("java") is not None and (LIBS / f"kafka_2.13-{KAFKA_VERSION}.jar").exists()


def classpath() -> str:
    return str(ensure_jars()) + "/*"


def connect_plugins_classpath() -> str:
    """Kafka 4.3.0's Connect runtime, connect-file, connect-mirror and kafka-shell alone (MirrorMaker 2's and
    kafka-metadata-shell's main classes run on it)."""
    ensure_jars()
    return str(CONNECT_PLUGINS) + "/*"


def _tools_log4j() -> Path:
    path = POM_DIR / ".libs-log4j2-tools.yaml"
    if not path.exists():  # written whole, then renamed: the other xdist worker never reads half of it
        part = path.with_name(f"{path.name}.{os.getpid()}")
        part.write_text(TOOLS_LOG4J2)
        os.replace(part, path)
    return path


def java(main_class: str, *args: str, jvm: list[str] | None = None, cp: str | None = None) -> list[str]:
    """The command line running one of Kafka's main classes, as bin/kafka-run-class.sh does (on the 4.4.0 jars
    unless ``cp`` says otherwise)."""
    return ["java", *(TOOL_JVM if jvm is None else jvm), f"-Dlog4j2.configurationFile={_tools_log4j()}",
            "-cp", classpath() if cp is None else cp, main_class, *args]


def run_tool(main_class: str, *args: str, input: str | None = None, timeout: float = 120,
             check: bool = False) -> subprocess.CompletedProcess:
    """Run one of Kafka's tools (e.g. ``org.apache.kafka.tools.TopicCommand``) to completion."""
    return subprocess.run(java(main_class, *args), input=input, capture_output=True, text=True,
                          timeout=timeout, check=check)


# The main classes behind Kafka's bin/*.sh scripts (Kafka 4.4).
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-server-start": "kafka.Kafka",
}


class KafkaProcess(ChildProcess):
    stop_timeout = 60

    """One KRaft node (``process.roles=broker,controller``) in a child JVM."""

    def __init__(self, data_dir: Path, node_id: int = 1, port: int | None = None,
                 controller_port: int | None = None, voters: str | None = None, cluster_id: str | None = None,
                 **overrides: object):
        self.data_dir = Path(data_dir)
        self.node_id = node_id
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.voters = voters or f"{node_id}@127.0.0.1:{self.controller_port}"
        self.cluster_id = cluster_id or random_cluster_id()
        nodes = self.voters.count("@")
        self.props = {
            "process.roles": "broker,controller", "node.id": str(node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"), "num.partitions": "1",
            "offsets.topic.replication.factor": str(nodes), "transaction.state.log.replication.factor": str(nodes),
            "transaction.state.log.min.isr": "1", "share.coordinator.state.topic.replication.factor": str(nodes),
            "share.coordinator.state.topic.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "50",
            # Share groups (KIP-932) are on: 4.4's storage format finalizes share.version=2 without
            # a --feature flag. Only the lower bounds of the group configs tests set per group
            # (share.record.lock.duration.ms, share.heartbeat.interval.ms, share.session.timeout.ms)
            # are lowered here; the broker-wide defaults stay Kafka's.
            "group.share.min.record.lock.duration.ms": "1000",
            "group.share.min.heartbeat.interval.ms": "500",
            "group.share.min.session.timeout.ms": "6000",
        }
        self.props.update({k: str(v) for k, v in overrides.items()})
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / "server.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return Path(self.props["log.dirs"].split(",")[0])

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "server.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        (self.data_dir / "log4j2.yaml").write_text(
            LOG4J2.format(path=self.log_path, level=os.environ.get("SAMSA_KAFKA_LOG_LEVEL", "INFO")))
        return conf

    def format(self) -> None:
        """``kafka-storage format -t <cluster id> -c server.properties`` (once: a formatted dir is kept)."""
        conf = self._write_config()
        if (self.log_dir / "meta.properties").exists():
            return
        # --cluster-id=ID: a random id may begin with "-", which argparse would take for an option
        r = run_tool(TOOLS["kafka-storage"], "format", f"--cluster-id={self.cluster_id}", "-c", str(conf),
                     "--ignore-formatted")
        if r.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({r.returncode}): {r.stdout}{r.stderr}")

    def spawn(self) -> "KafkaProcess":
        """Start the JVM without waiting (a cluster's nodes start together)."""
        self.format()
        jvm = SERVER_JVM + [f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.yaml'}",
                            f"-Dkafka.logs.dir={self.data_dir}"]
        self.proc = subprocess.Popen(["java", *jvm, "-cp", classpath(), TOOLS["kafka-server-start"],
                                      str(self.data_dir / "server.properties")],
                                     stdout=open(self.data_dir / "stdout.log", "ab"), stderr=subprocess.STDOUT)
        return self

    def start(self, timeout: float = 120) -> "KafkaProcess":
        self.spawn()
        self.wait_serving(timeout)
        return self

    def wait_serving(self, timeout: float = 120, brokers: int = 1) -> None:
        """Until a Metadata request answers with ``brokers`` brokers (the node has joined its quorum)."""
        from samsa.protocol import api  # the codec, for one Metadata round trip
        deadline = time.time() + timeout
        last = "nothing listening"
        while time.time() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                    s.settimeout(5)
                    for chunk in [b"".join(api.encode_request(3, 1, 7, "probe", {"topics": []}))]:
                        s.sendall(chunk)
                    size = int.from_bytes(_read(s, 4), "big")
                    body = api.decode_response(3, 1, _read(s, size))[1]
                    if len(body["brokers"]) >= brokers and body.get("controller_id", -1) >= 0:
                        return
                    last = f"{len(body['brokers'])} brokers"
            except OSError as e:
                last = str(e)
            time.sleep(0.2)
        raise TimeoutError(f"Kafka at {self.bootstrap} not serving after {timeout}s ({last}); see {self.log_path}")



def _read(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` prints it (base64url of 16 random bytes)."""
    import base64
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def start_cluster(data_dir: Path, nodes: int = 1, timeout: float = 180, **overrides: object) -> list[KafkaProcess]:
    """``nodes`` combined KRaft nodes forming one cluster (a static quorum of all of them)."""
    ports = [(free_port(), free_port()) for _ in range(nodes)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{cp}" for i, (_, cp) in enumerate(ports))
    cluster_id = random_cluster_id()
    procs = [KafkaProcess(Path(data_dir) / f"kafka-{i + 1}", node_id=i + 1, port=p, controller_port=cp,
                          voters=voters, cluster_id=cluster_id, **overrides)
             for i, (p, cp) in enumerate(ports)]
    try:
        for p in procs:
            p.spawn()
        for p in procs:
            p.wait_serving(timeout, brokers=nodes)
    except BaseException:
        for p in procs:
            p.kill()
        raise
    return procs
