"""The console without a browser: read-only mode, and a broker that is gone."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

from console_process import ConsoleProcess

from broker_process import BrokerProcess
from waiting import wait_until


def get(url: str, data: dict | None = None) -> tuple[int, str]:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    try:
        with urllib.request.urlopen(url, data=body, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_read_only_console_shows_but_changes_nothing(console_broker):
    c = ConsoleProcess(console_broker.bootstrap, "--read-only")
    try:
        status, page = get(c.url + "/topics")
        assert status == 200 and "read-only" in page
        assert 'id="create-topic"' not in page
        status, page = get(c.url + "/topics", {"name": "never-created"})
        assert status == 403
        assert "This console is read-only (--read-only): it makes no changes." in page
        status, page = get(c.url + "/topics")
        assert "never-created" not in page
    finally:
        c.stop()


def test_a_lost_broker_is_a_clear_message(tmp_path):
    broker = BrokerProcess(tmp_path / "lost").start()
    c = ConsoleProcess(broker.bootstrap)
    try:
        assert get(c.url + "/")[0] == 200
        broker.kill()
        status, page = wait_until(lambda: (r := get(c.url + "/topics")) and r[0] == 503 and r, "the console to notice")
        assert f"Could not reach the cluster at {broker.bootstrap}" in page
        assert "Traceback" not in page
    finally:
        c.stop()
        broker.kill()


def test_bad_input_gives_one_sentence(console):
    cases = {
        "/topics/no-such/messages": (404, "Topic &#39;no-such&#39; does not exist."),
        "/groups/no-such-group": (404, "Consumer group &#39;no-such-group&#39; does not exist."),
        "/nowhere": (404, "There is no page at /nowhere."),
    }
    for path, (code, sentence) in cases.items():
        status, page = get(console.url + path)
        assert status == code and sentence in page, (path, status)
    status, page = get(console.url + "/topics", {"name": "bad-partitions", "partitions": "many"})
    assert status == 400 and "The number of partitions must be a whole number, not &#39;many&#39;." in page


def test_a_consumer_group_shows_its_type_and_epochs(console_broker):
    """A consumer group of the KIP-848 protocol: its type, group epoch and its members' epochs and
    target assignments on the group's page, its type in the list."""
    from samsa import Admin, Consumer
    from samsa.client.types import NewTopic
    topic, group = "kip848-console", "kip848-console-group"
    with Admin({"bootstrap.servers": console_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)])
    c = ConsoleProcess(console_broker.bootstrap)
    consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": group,
                         "group.protocol": "consumer"})
    try:
        consumer.subscribe([topic])
        wait_until(lambda: consumer.poll(0.1) == [] and len(consumer.assignment()) == 2, "the assignment")
        status, page = wait_until(lambda: (r := get(c.url + f"/groups/{group}")) and "Stable" in r[1] and r,
                                  "the group Stable in the console")
        assert status == 200 and '<span id="type">Consumer</span> group' in page
        assert 'class="num member-epoch">' in page and f"{topic}-0, {topic}-1" in page
        status, page = get(c.url + "/groups")
        assert status == 200 and "<td>Consumer</td><td>Stable</td>" in page
    finally:
        consumer.close()
        c.stop()


def test_a_share_group_shows_members_start_offsets_and_lag(console_broker, console):
    """A share group (KIP-932) of confluent-kafka's ShareConsumer: in the groups list with its
    type, state and member count; on its page its member, assignment, and per partition the start
    offset and lag DescribeShareGroupOffsets gives."""
    from confluent_kafka import Producer, ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from samsa import Admin
    from samsa.client.types import NewTopic
    topic, group = "share-console", "share-console-group"
    with Admin({"bootstrap.servers": console_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)])
    r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    configs = AdminClient({"bootstrap.servers": console_broker.bootstrap})
    configs.incremental_alter_configs([r])[r].result(30)

    def produce(n: int) -> None:
        p = Producer({"bootstrap.servers": console_broker.bootstrap})
        for i in range(n):
            p.produce(topic, f"v{i}".encode(), partition=0)
        assert p.flush(30) == 0

    def page_with(path: str, *texts: str) -> str:
        def ready():
            status, page = get(console.url + path)
            return status == 200 and all(t in page for t in texts) and page
        return wait_until(ready, f"{path} showing {texts}")

    produce(3)
    c = ShareConsumer({"bootstrap.servers": console_broker.bootstrap, "group.id": group,
                       "client.id": "console-share-client", "log_level": 3})
    try:
        c.subscribe([topic])
        got: list = []
        wait_until(lambda: got.extend(m for m in c.poll(0.2) if not m.error()) or len(got) >= 3, "3 records")
        c.commit_sync()
        # One member with both partitions; partition 0 read to its end: start offset 3, no lag.
        page = page_with(f"/groups/{group}", "Stable", '<td class="num start">3</td>')
        assert '<span id="type">Share</span> group' in page and "1 member(s)" in page
        assert "console-share-client" in page and f"{topic}-0, {topic}-1" in page
        assert f'<tr><td>{topic}</td><td class="num">0</td><td class="num start">3</td>\n' \
               '<td class="num">3</td><td class="num lag">0</td></tr>' in page
        page_with("/groups", f"{group}</a></td>\n<td>Share</td><td>Stable</td><td class=\"num\">1</td>")
        status, page = get(console.url + f"/groups/{group}/reset", {"choice": "to-earliest", "execute": "1"})
        assert status == 409 and f"while the group &#39;{group}&#39; is inactive, but it is Stable" in page
    finally:
        c.close()
    # The member gone and two more records: Empty, start offset 3, lag 2 (to the log end, 5).
    produce(2)
    page = page_with(f"/groups/{group}", "Empty", '<td class="num">5</td><td class="num lag">2</td>')
    assert "No members." in page and '<b id="total-lag">2</b>' in page
    page_with("/groups", f"{group}</a></td>\n<td>Share</td><td>Empty</td><td class=\"num\">0</td>")
    # Reset to the earliest offset (AlterShareGroupOffsets on the empty group): all 5 records again.
    status, page = get(console.url + f"/groups/{group}/reset", {"choice": "to-earliest", "execute": "1"})
    assert status == 200 and 'id="reset-done"' in page, page
    page_with(f"/groups/{group}", '<td class="num start">0</td>\n<td class="num">5</td><td class="num lag">5</td>')


def test_a_streams_group_shows_tasks_topology_and_lag(console_broker, console):
    """A streams group (KIP-1071), its member made of raw StreamsGroupHeartbeats (tests/streams_wire.py):
    in the groups list with the type Streams; on its page the member's tasks, the topology with the
    internal topics' partition counts, and the input partitions' committed offsets and lag."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent.parent / "differential"))
    from harness import Side, create_topic
    from streams_wire import StreamsMember

    topic, app = "streams-console", "streams-console-app"
    side = Side("samsa", console_broker.bootstrap)
    try:
        create_topic(side, topic, 2)
        side.produce(topic, [(None, b"x")] * 4, 0)
        m = StreamsMember(side, app, "console-member", topic)
        m.heartbeat()
        m.settle()
        m.commit({(topic, 0): 1})

        def page_with(path: str, *texts: str) -> str:
            def ready():
                status, page = get(console.url + path)
                return status == 200 and all(t in page for t in texts) and page
            return wait_until(ready, f"{path} showing {texts}")
        page = page_with(f"/groups/{app}", "Stable", '<span id="type">Streams</span> group')
        assert '<td class="active">0_0, 0_1, 1_0, 1_1</td>' in page, page
        assert f"{app}-counts-repartition (2)" in page and f"{app}-counts-changelog (2)" in page
        assert f'<tr><td>{topic}</td><td class="num">0</td><td class="num committed">1</td>\n' \
               '<td class="num">4</td><td class="num lag">3</td></tr>' in page, page
        page_with("/groups", f"{app}</a></td>\n<td>Streams</td><td>Stable</td><td class=\"num\">1</td>")
        m.leave()
        page_with(f"/groups/{app}", "Empty", "No members.")
    finally:
        side.close()
