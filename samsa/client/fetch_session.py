"""A fetcher's side of a fetch session (KIP-227) with one broker (Kafka's FetchSessionHandler).

The first fetch to a broker is full (session epoch 0) and asks for a session; when the answer
carries a session id, later fetches name only the partitions added or whose fetch data
changed (offset, max bytes, leader epoch, log start offset) and forget the ones no longer
wanted, with the session's next epoch. The broker then answers only partitions with news.
A failed fetch or a session error starts over with a full fetch (closing the old session).
Used by Samsa's consumer and by the brokers' replica fetchers, on names (Fetch v7-12).
"""

from __future__ import annotations

from samsa.protocol import errors

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
INT32_MAX = 2147483647
SESSION_ERRORS = (errors.E_FETCH_SESSION_ID_NOT_FOUND, errors.E_INVALID_FETCH_SESSION_EPOCH,
                  errors.E_FETCH_SESSION_TOPIC_ID_ERROR)

Key = tuple[str, int]  # (topic, partition)


class FetchSessionHandler:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[Key, dict] = {}  # what the broker's session holds, as last sent
        self._pending: dict[Key, dict] | None = None

    def build(self, wanted: dict[Key, dict]) -> dict:
        """The session fields of the next Fetch (``session_id``, ``session_epoch``, ``topics``,
        ``forgotten_topics_data``) for fetching ``wanted`` (partition entries by key, in order)."""
        self._pending = wanted
        if not self.enabled:
            return {"session_id": 0, "session_epoch": FINAL_EPOCH, "topics": _topics(wanted.items()),
                    "forgotten_topics_data": []}
        if self.epoch == INITIAL_EPOCH:
            return {"session_id": self.session_id, "session_epoch": INITIAL_EPOCH,
                    "topics": _topics(wanted.items()), "forgotten_topics_data": []}
        sent = self.partitions
        changed = [(k, p) for k, p in wanted.items() if sent.get(k) != p]
        forgotten: dict[str, list[int]] = {}
        for k in sent:
            if k not in wanted:
                forgotten.setdefault(k[0], []).append(k[1])
        return {"session_id": self.session_id, "session_epoch": self.epoch, "topics": _topics(changed),
                "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten.items()]}

    def handle_response(self, resp: dict) -> bool:
        """Take the answer to the last :meth:`build`; False on a session error (the next fetch
        is full again)."""
        wanted, self._pending = self._pending, None
        if not self.enabled:
            return True
        code = resp.get("error_code", 0)
        if code:
            self.failed(forget_id=code == errors.E_FETCH_SESSION_ID_NOT_FOUND)
            return code not in SESSION_ERRORS
        session_id = resp.get("session_id", 0)
        if self.epoch == INITIAL_EPOCH or session_id == 0:
            if session_id:
                self.session_id, self.epoch = session_id, 1
                self.partitions = dict(wanted or {})
            else:  # no slot on the broker (or the session ended): full fetches, asking again
                self.session_id, self.epoch, self.partitions = 0, INITIAL_EPOCH, {}
            return True
        self.epoch = 1 if self.epoch >= INT32_MAX else self.epoch + 1
        self.partitions = dict(wanted or {})
        return True

    def failed(self, forget_id: bool = False) -> None:
        """The fetch failed (or the connection dropped): the next one is full, closing the old session."""
        self._pending = None
        if forget_id:
            self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self.partitions = {}

    def close_request(self) -> dict | None:
        """The session fields that close the session (epoch -1), or None without one."""
        if not self.session_id:
            return None
        return {"session_id": self.session_id, "session_epoch": FINAL_EPOCH, "topics": [],
                "forgotten_topics_data": []}


def _topics(items) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for (topic, _), p in items:
        by_topic.setdefault(topic, []).append(p)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
