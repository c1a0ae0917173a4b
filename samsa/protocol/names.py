"""Kafka's rule for topic names, shared by the broker and the client tools."""

from __future__ import annotations

import re

from samsa.protocol import errors

MAX_TOPIC_NAME = 249
#: Kafka's internal topics (its ``Topic.isInternal``): ``is_internal`` in Metadata and DescribeTopicPartitions.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str | None, *, controller: bool = False) -> None:
    """InvalidTopicError unless ``name`` is a legal topic name. The client tools word it as Kafka's
    clients do; ``controller=True`` as Kafka 4's controller answers CreateTopics."""
    if controller:
        if not name:
            raise errors.InvalidTopicError("Topic name is invalid: the empty string is not allowed")
        if name in (".", ".."):
            raise errors.InvalidTopicError(f"Topic name is invalid: '{name}' is not allowed")
        if len(name) > MAX_TOPIC_NAME:
            raise errors.InvalidTopicError(
                f"Topic name is invalid: the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME}")
        if not _LEGAL_TOPIC.fullmatch(name):
            raise errors.InvalidTopicError(
                f"Topic name is invalid: '{name}' contains one or more characters other than "
                "ASCII alphanumerics, '.', '_' and '-'")
        return
    if not name:
        raise errors.InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise errors.InvalidTopicError("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME:
        raise errors.InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters, topic name: {name}")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise errors.InvalidTopicError(
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'")
