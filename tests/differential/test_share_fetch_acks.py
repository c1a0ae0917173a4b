"""ShareFetch and ShareAcknowledge with share group members on both brokers: acquisition of
whole batches, another member's acknowledgement (not the owner), release redelivered at once
with delivery count 2, accept and reject per offset, acknowledging what is not acquired or
not there, a bad acknowledge type, BatchSize and MaxRecords cutting the acquired ranges at
batch boundaries, and a closed session's records released to the other member."""

from __future__ import annotations

import uuid

from harness import create_topic
from waiting import wait_until

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79


def _join(side, group: str, topic: str) -> str:
    member = str(uuid.uuid4())
    wait_until(lambda: side.call(10, {"key": group, "key_type": 0}, 3)["error_code"] == 0,
               f"a coordinator for {group} on {side.name}", 30)
    hb = wait_until(lambda: (r := side.call(76, {"group_id": group, "member_id": member, "member_epoch": 0,
                                                  "rack_id": None, "subscribed_topic_names": [topic]}, 1))
                    ["error_code"] == 0 and r, f"{member} joined on {side.name}", 30)

    def assigned():
        if hb["assignment"] and hb["assignment"]["topic_partitions"]:
            return True  # Samsa assigns in the joining heartbeat's answer, Kafka in a later one
        r = side.call(76, {"group_id": group, "member_id": member, "member_epoch": hb["member_epoch"],
                           "rack_id": None, "subscribed_topic_names": None}, 1)
        return r["error_code"] == 0 and r["assignment"] and r["assignment"]["topic_partitions"]
    wait_until(assigned, f"{member} assigned a partition on {side.name}", 30)
    return member


def _summary(r: dict) -> dict:
    """The answer with each partition's records as their byte count's sign (the batches' bytes carry
    timestamps and producer ids each broker picks)."""
    for t in r.get("responses", []):
        for p in t["partitions"]:
            if "records" in p:
                p["records"] = "some" if p["records"] else "none"
    return r


def test_share_fetch_acknowledgements(diff):
    tag = uuid.uuid4().hex[:8]
    topic, group = f"diff-share-acks-{tag}", f"diff-share-acks-g-{tag}"

    def run(side):
        create_topic(side, topic)
        tid = side.call(3, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}, 12)["topics"][0]["topic_id"]
        m1, m2 = _join(side, group, topic), _join(side, group, topic)
        epochs = {m1: 0, m2: 0}

        def topics(acks=()):
            return [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": list(acks)}]}]

        def fetch(m, tps=(), **kw):
            body = {"group_id": group, "member_id": m, "share_session_epoch": epochs[m], "max_wait_ms": 300,
                    "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
                    "topics": list(tps), "forgotten_topics_data": []}
            body.update(kw)
            epochs[m] += 1
            return _summary(side.call(SHARE_FETCH, body, 1))

        def acknowledge(m, acks, epoch=None):
            e = epochs[m] if epoch is None else epoch
            epochs[m] += 1
            return side.call(SHARE_ACKNOWLEDGE, {"group_id": group, "member_id": m, "share_session_epoch": e,
                                                 "topics": topics(acks)}, 1)

        def a(first, last, *types):
            return {"first_offset": first, "last_offset": last, "acknowledge_types": list(types)}
        def open_session(m):
            """Open, again until the share partition has loaded (the state topic may be coming up)."""
            def loaded():
                epochs[m] = 0
                r = fetch(m, topics(), max_wait_ms=0)
                return r if r["error_code"] == 0 and not r["responses"][0]["partitions"][0]["error_code"] else None
            return wait_until(loaded, f"{m}'s share session on {side.name}", 60)
        steps = [("open m1", open_session(m1)), ("open m2", open_session(m2))]
        for i in range(3):
            side.produce(topic, [(None, b"v%d-%d" % (i, j)) for j in range(3)])
        steps.append(("m1 acquires", fetch(m1)))
        steps.append(("m2 nothing", fetch(m2, max_wait_ms=0)))
        steps.append(("m2 acks m1's", fetch(m2, topics([a(0, 2, 1)]), max_wait_ms=0)))
        steps.append(("m1 release, accept, per offset",
                      fetch(m1, topics([a(0, 2, 2), a(3, 5, 1), a(6, 8, 3, 1, 3)]))))
        steps.append(("m1 acks acknowledged", fetch(m1, topics([a(4, 4, 1)]), max_wait_ms=0)))
        steps.append(("m1 acks beyond", acknowledge(m1, [a(40, 41, 1)])))
        steps.append(("m1 bad type", acknowledge(m1, [a(0, 0, 7)])))
        steps.append(("m1 accepts redelivery", acknowledge(m1, [a(0, 2, 1)])))
        for i in range(3):
            side.produce(topic, [(None, b"w%d-%d" % (i, j)) for j in range(4)])
        steps.append(("m2 batch_size 3, max_records 5", fetch(m2, batch_size=3, max_records=5)))
        steps.append(("m2 acquired", fetch(m2, max_wait_ms=0)))
        steps.append(("m2 closes", acknowledge(m2, [a(9, 9, 1)], epoch=-1)))
        steps.append(("m1 gets m2's released", fetch(m1, max_wait_ms=5000)))
        return steps
    diff(run)
