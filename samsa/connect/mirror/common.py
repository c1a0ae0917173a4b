"""What the three MM2 connectors share: their config keys, cluster clients and the topic filter."""

from __future__ import annotations

import threading
from typing import Any, Callable

from samsa.connect.api import ConfigKey
from samsa.connect.mirror import policy as policies

TOPICS_EXCLUDE = r".*[\-\.]internal, .*\.replica, __.*"
GROUPS_EXCLUDE = r"console-consumer-.*, connect-.*, __.*"
CLIENT_KEYS = ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
               "ssl.ca.location", "client.id")


def config_def() -> list[ConfigKey]:
    return [ConfigKey("source.cluster.alias", doc="Alias of source cluster"),
            ConfigKey("target.cluster.alias", default="target", doc="Alias of target cluster"),
            ConfigKey("source.cluster.bootstrap.servers", doc="The source cluster's bootstrap servers"),
            ConfigKey("target.cluster.bootstrap.servers", doc="The target cluster's bootstrap servers"),
            ConfigKey("replication.policy.class", "CLASS",
                      "org.apache.kafka.connect.mirror.DefaultReplicationPolicy", "LOW"),
            ConfigKey("replication.policy.separator", default=".", importance="LOW")]


def cluster_client(config: dict[str, str], side: str, **extra: Any) -> dict[str, Any]:
    """Client config for ``side`` (``source``/``target``): ``<side>.cluster.*`` keys."""
    prefix = f"{side}.cluster."
    out = {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix) and k[len(prefix):] != "alias"}
    out = {k: v for k, v in out.items() if k in CLIENT_KEYS or k.startswith(("ssl.", "sasl."))}
    out.update(extra)
    return out


def integer(config: dict[str, str], key: str, default: int) -> int:
    value = config.get(key)
    return default if value in (None, "") else int(value)


def flag(config: dict[str, str], key: str, default: bool) -> bool:
    value = config.get(key)
    return default if value in (None, "") else str(value).strip().lower() == "true"


class TopicFilter:
    def __init__(self, config: dict[str, str]):
        self.policy = policies.policy(config)
        self.include = policies.pattern(config.get("topics"), ".*")
        self.exclude = policies.pattern(config.get("topics.exclude", config.get("topics.blacklist")), TOPICS_EXCLUDE)
        self.target = config.get("target.cluster.alias", "target")

    def replicate(self, topic: str) -> bool:
        """Mirror ``topic``? Heartbeats always; never a topic that came from the target (a cycle)."""
        if policies.is_cycle(self.policy, topic, self.target):
            return False
        if self.policy.is_heartbeats_topic(topic):
            return True
        if self.policy.is_internal_topic(topic) or self.exclude.fullmatch(topic):
            return False
        return bool(self.include.fullmatch(topic))


class Periodic(threading.Thread):
    """Runs ``work`` every ``interval`` seconds until stopped (a connector's refresh loop)."""

    def __init__(self, name: str, interval: float, work: Callable[[], None]):
        super().__init__(name=name, daemon=True)
        self.interval, self.work = interval, work
        self.stopping = threading.Event()

    def run(self) -> None:
        import logging
        while not self.stopping.wait(self.interval):
            try:
                self.work()
            except Exception:  # noqa: BLE001 - the next round retries
                logging.getLogger(__name__).exception("%s", self.name)

    def stop(self) -> None:
        self.stopping.set()
