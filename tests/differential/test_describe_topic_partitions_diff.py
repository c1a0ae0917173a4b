"""DescribeTopicPartitions (API 75, KIP-966) against Apache Kafka 4.4.0 and Samsa: a walk through
the pages with the cursor (topics asked for, an unknown one among them; and every topic), the
answer's partitions with their (empty) eligible leader replicas, and the requests Kafka refuses."""

from __future__ import annotations

from harness import create_topic

A, B = "dtp-walk-a", "dtp-walk-b"  # 3 and 2 partitions
UNKNOWN = "dtp-walk-aa"            # sorts between them
AFTER = "dtp-walk-c"               # sorts after B on both sides, whatever other tests made there


def _dtp(side, topics, limit, cursor=None) -> dict | str:
    return side.fresh_call(75, {"topics": [{"name": t} for t in topics], "response_partition_limit": limit,
                                "cursor": cursor}, 0)


def _page(r) -> object:
    """One answer, every field but the broker-picked ones (the harness stars topic ids and leaders)."""
    if isinstance(r, str):
        return r
    return {"topics": r["topics"], "next_cursor": r["next_cursor"]}


def _setup(side) -> None:
    create_topic(side, A, 3)
    create_topic(side, B, 2)


def test_dtp_pages_through_named_topics(diff):
    """Two partitions a page over [B, unknown, A] (asked for out of order): the pages, their cursors
    and the unknown topic's error where the walk meets it."""
    def run(side):
        _setup(side)
        pages, cursor = [], None
        for _ in range(6):
            r = _dtp(side, [B, UNKNOWN, A], 2, cursor)
            pages.append(_page(r))
            cursor = r["next_cursor"]
            if cursor is None:
                break
        return pages
    diff(run)


def test_dtp_pages_through_every_topic(diff):
    """No topics named: every topic, from a cursor on A, until the cursor passes B (a topic of this
    test's own sorts after B on both sides: what other tests made on either broker does not decide
    whether the walk ends at B)."""
    def run(side):
        _setup(side)
        create_topic(side, AFTER, 1)
        pages, cursor = [], {"topic_name": A, "partition_index": 1}
        for _ in range(4):
            r = _dtp(side, [], 2, cursor)
            pages.append([(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
                          for t in r["topics"]])
            cursor = r["next_cursor"]
            if cursor is None or cursor["topic_name"] > B:
                break
        return pages, cursor if cursor is None or cursor["topic_name"] <= B else "past B"
    diff(run)


def test_dtp_limits_and_refusals(diff):
    """The partition limit (0 and below count as 1), a cursor past the topic's partitions, and what
    Kafka refuses: a cursor whose topic is not asked for or whose partition is negative
    (INVALID_REQUEST for every topic), invalid names (INVALID_TOPIC_EXCEPTION), an empty name
    without a cursor (UNKNOWN_SERVER_ERROR for every topic), internal topic names."""
    def run(side):
        _setup(side)
        return {
            "limit-0": _page(_dtp(side, [A], 0)),
            "limit-neg": _page(_dtp(side, [A], -5)),
            "cursor-past-end": _page(_dtp(side, [A, B], 10, {"topic_name": A, "partition_index": 7})),
            "cursor-not-asked": _page(_dtp(side, [B, B], 10, {"topic_name": A, "partition_index": 0})),
            "cursor-negative": _page(_dtp(side, [A], 10, {"topic_name": A, "partition_index": -1})),
            "invalid-names": _page(_dtp(side, [A, "bad/name", ".", "x" * 250], 10)),
            "empty-name": _page(_dtp(side, [A, ""], 10)),
            "internal-names": _page(_dtp(side, ["__transaction_state", "__share_group_state", "__cluster_metadata"],
                                         10)),
            "duplicates": _page(_dtp(side, [B, B], 10)),
        }
    diff(run)
