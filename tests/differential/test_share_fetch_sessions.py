"""Share sessions (KIP-932) on both brokers, without a share group member: ShareFetch and
ShareAcknowledge answers and errors for session epochs (open, next, wrong, closed, unknown),
requests without a group or member id, acknowledgements on the opening request, an unknown
topic id, and a session ending with the connection that opened it."""

from __future__ import annotations

import os
import time
import uuid

from harness import Side, create_topic
from waiting import wait_until

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79


def _fetch(side, member, epoch, topics=(), group="diff-share-g", **kw):
    body = {"group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 0,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
            "topics": list(topics), "forgotten_topics_data": []}
    body.update(kw)
    return side.call(SHARE_FETCH, body, 1)


def _ack(side, member, epoch, topics=(), group="diff-share-g"):
    return side.call(SHARE_ACKNOWLEDGE, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                                         "topics": list(topics)}, 1)


def _topic(tid, partition=0, acks=()):
    return {"topic_id": tid, "partitions": [{"partition_index": partition, "acknowledgement_batches": list(acks)}]}


def test_share_fetch_session_epochs_and_errors(diff):
    topic = f"diff-share-{os.getpid()}-{int(time.time())}"
    unknown_id = uuid.uuid4().bytes

    def scenario(side):
        create_topic(side, topic)
        member = str(uuid.uuid4())
        other = str(uuid.uuid4())
        steps = []
        steps.append(("versions", side.versions(SHARE_FETCH), side.versions(SHARE_ACKNOWLEDGE)))
        steps.append(("unknown session", _fetch(side, member, 4)))
        steps.append(("ack opening", _ack(side, member, 0)))
        steps.append(("no member", _fetch(side, "", 0)))
        steps.append(("no group", _fetch(side, member, 0, group=None)))
        steps.append(("acks on open", _fetch(side, member, 0, [_topic(unknown_id, acks=[
            {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}])])))
        steps.append(("open", _fetch(side, member, 0)))
        steps.append(("wrong epoch", _fetch(side, member, 5)))
        steps.append(("next", _fetch(side, member, 1)))
        steps.append(("ack next", _ack(side, member, 2)))
        steps.append(("unknown topic id", _fetch(side, member, 3, [_topic(unknown_id)])))
        steps.append(("ack unknown topic id", _ack(side, member, 4, [_topic(unknown_id, acks=[
            {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}])])))
        steps.append(("close", _ack(side, member, -1)))
        steps.append(("after close", _fetch(side, member, 5)))
        steps.append(("close again", _ack(side, member, -1)))
        steps.append(("final fetch without session", _fetch(side, other, -1)))
        # a session belongs to the connection that opened it last: when that one closes, it ends
        steps.append(("reopen", _fetch(side, member, 0)))
        steps.append(("open again", _fetch(side, member, 0)))
        steps.append(("next after open again", _fetch(side, member, 1)))
        second = Side(side.name, side.bootstrap)
        try:
            steps.append(("next on another connection", _fetch(second, member, 2)))
            steps.append(("opened on another connection", _fetch(second, member, 0)))
        finally:
            second.close()
        steps.append(("after that connection closed", wait_until(
            lambda: (r := _fetch(side, member, 1))["error_code"] == 122 and r, "the session gone with its connection", 15)))
        return steps
    diff(scenario)
