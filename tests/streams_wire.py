"""A streams group member (KIP-1071) made of raw StreamsGroupHeartbeats, for the tests of the tools
around streams groups (samsa streams-groups, the console): it joins with a word count's topology
(subtopology 0 reads the input and writes a repartition topic, subtopology 1 reads it and keeps a
store with a changelog), heartbeats until it holds its tasks, and leaves. The Kafka Streams
application itself is in tests/groups/test_java_streams_group.py."""

from __future__ import annotations

from waiting import wait_until


def topology(topic: str, app: str) -> dict:
    return {"epoch": 0, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [topic], "source_topic_regex": [], "state_changelog_topics": [],
         "repartition_sink_topics": [f"{app}-counts-repartition"], "repartition_source_topics": [],
         "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [],
         "state_changelog_topics": [{"name": f"{app}-counts-changelog", "partitions": 0, "replication_factor": 0,
                                     "topic_configs": [{"key": "cleanup.policy", "value": "compact"}]}],
         "repartition_sink_topics": [],
         "repartition_source_topics": [{"name": f"{app}-counts-repartition", "partitions": 0, "replication_factor": 0,
                                        "topic_configs": []}],
         "copartition_groups": []}]}


class StreamsMember:
    """One member over a harness.Side (a raw connection through Samsa's codec)."""

    def __init__(self, side, app: str, member_id: str, topic: str):
        self.side, self.app, self.member_id, self.topic = side, app, member_id, topic
        self.epoch = 0
        self.held = {"active_tasks": [], "standby_tasks": [], "warmup_tasks": []}

    def heartbeat(self) -> dict:
        joining = self.epoch == 0
        if joining:  # the group's coordinator found (the offsets topic made) and loaded
            wait_until(lambda: self.side.call(10, {"key": self.app, "key_type": 0}, 3)["error_code"] == 0,
                       f"a coordinator for {self.app}", 30)
        body = {"group_id": self.app, "member_id": self.member_id, "member_epoch": self.epoch,
                "endpoint_information_epoch": 0, "instance_id": None, "rack_id": None,
                "rebalance_timeout_ms": 30000 if joining else -1,
                "topology": topology(self.topic, self.app) if joining else None,
                "process_id": f"process-{self.member_id}" if joining else None, "user_endpoint": None,
                "client_tags": [] if joining else None, "task_offsets": [] if joining else None,
                "task_end_offsets": [] if joining else None, "shutdown_application": False,
                **({"active_tasks": [], "standby_tasks": [], "warmup_tasks": []} if joining else self.held)}
        r = self.side.call(88, body)
        assert r["error_code"] == 0, r
        self.epoch = r["member_epoch"]
        if r["active_tasks"] is not None:
            self.held = {k: r[k] for k in self.held}
        return r

    def settle(self, timeout: float = 60) -> None:
        """Heartbeats until it holds active tasks and its group is Stable."""
        def settled() -> bool:
            self.heartbeat()
            d = self.side.call(89, {"group_ids": [self.app], "include_authorized_operations": False})["groups"][0]
            return bool(self.held["active_tasks"]) and d["group_state"] == "Stable"
        wait_until(settled, f"{self.member_id} holding its tasks", timeout, interval=0.3)

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        """OffsetCommit v9 as the member (its epoch), as a Kafka Streams task commits."""
        by_topic: dict[str, list] = {}
        for (t, p), o in offsets.items():
            by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": o,
                                               "committed_leader_epoch": -1, "committed_metadata": ""})
        r = self.side.call(8, {"group_id": self.app, "generation_id_or_member_epoch": self.epoch,
                               "member_id": self.member_id, "group_instance_id": None, "retention_time_ms": -1,
                               "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}, 9)
        codes = [p["error_code"] for t in r["topics"] for p in t["partitions"]]
        assert codes == [0] * len(codes), r

    def leave(self) -> None:
        self.epoch = -1
        self.heartbeat()
