"""The seeds' producer plugins, written in Python: a User serializer and an interceptor chain.

Loaded by dotted name (``"interceptor.classes": "seed_plugins.InterceptorOne,..."``), as
Kafka loads classes by name.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from samsa.serialization import SerializationError

EVENTS: list[str] = []


@dataclass
class User:
    user_id: int | None
    username: str | None


class UserSerializer:
    """4 bytes user id, 4 bytes name length, the name in UTF-8 (the seed's layout)."""

    def configure(self, configs: dict) -> None:
        pass

    def serialize(self, topic: str, data: User | None, headers=None) -> bytes | None:
        try:
            if data is None or data.user_id is None or data.username is None:
                return None
            name = data.username.encode("utf-8")
            return struct.pack(">ii", data.user_id, len(name)) + name
        except Exception as e:
            raise SerializationError("数据序列化失败") from e


def deserialize_user(data: bytes) -> User:
    user_id, length = struct.unpack_from(">ii", data)
    return User(user_id, data[8:8 + length].decode("utf-8"))


class InterceptorOne:
    def configure(self, configs: dict) -> None:
        EVENTS.append(f"one configured: {configs.get('classContent')}")

    def on_send(self, record: dict) -> dict:
        EVENTS.append("拦截器1 -- go")
        return record

    def on_acknowledgement(self, metadata, exception) -> None:
        EVENTS.append("拦截器1 -- back")

    def close(self) -> None:
        EVENTS.append("one closed")


class InterceptorTwo(InterceptorOne):
    def configure(self, configs: dict) -> None:
        EVENTS.append(f"two configured: {configs.get('classContent')}")

    def on_send(self, record: dict) -> dict:
        EVENTS.append("拦截器2 -- go")
        return dict(record, value=f"{record['value']} (via two)")

    def on_acknowledgement(self, metadata, exception) -> None:
        EVENTS.append("拦截器2 -- back")
        raise RuntimeError("an interceptor's error is logged, never raised")

    def close(self) -> None:
        EVENTS.append("two closed")
