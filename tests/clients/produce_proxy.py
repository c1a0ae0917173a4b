"""A TCP proxy between Kafka clients and one broker that reads the frames going through it, so
a test can see and steer what is in flight: it counts Produce requests not yet answered,
can hold Produce answers back until a condition holds, and can flip a bit of a Produce
request on the way (as a bad network would) so that the broker refuses it.

Point the broker's ``advertised.listeners`` at the proxy so that clients reach the broker
only through it. Every answer is the broker's own.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from typing import Callable

from samsa.protocol import api, errors

PRODUCE = 0
_HEADER = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_RESPONSE = struct.Struct(">ii")  # size, correlation_id


class ProduceProxy:
    """``hold_responses()``: keep Produce answers back while it returns True (asked again whenever
    a frame passes). ``corrupt(n)``: flip a bit of the last record of the n-th Produce request
    (1-based), so that its batch's CRC no longer matches."""

    def __init__(self, broker_port: int, *, hold_responses: Callable[[], bool] = lambda: False,
                 corrupt: Callable[[int], bool] = lambda n: False, give_up_after: float = 20.0):
        self.broker_port = broker_port
        self.hold_responses, self.corrupt = hold_responses, corrupt
        self.give_up_after = give_up_after  # a held frame goes after this long whatever the condition says
        self.produce_requests = 0
        self.outstanding = 0
        self.max_outstanding = 0
        self.answers: list[int] = []  # error codes of the partitions in each Produce answer passed back
        self._kick: asyncio.Event | None = None
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(started,), daemon=True)
        self._thread.start()
        started.wait(10)

    def _main(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self._kick = asyncio.Event()
        self._server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        started.set()
        self.loop.run_forever()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.broker_port)
        pending: dict[int, int] = {}  # correlation id -> version of the Produce requests of this connection
        await asyncio.gather(self._requests(reader, up_writer, pending), self._responses(up_reader, writer, pending),
                             return_exceptions=True)
        writer.close()
        up_writer.close()

    async def _frame(self, reader: asyncio.StreamReader) -> bytes:
        size = await reader.readexactly(4)
        return size + await reader.readexactly(struct.unpack(">i", size)[0])

    async def _wait(self, until: Callable[[], bool]) -> None:
        """Until ``until()`` (asked again whenever a frame passes), or give_up_after seconds."""
        deadline = self.loop.time() + self.give_up_after
        while not until() and self.loop.time() < deadline:
            self._kick.clear()
            try:
                await asyncio.wait_for(self._kick.wait(), max(deadline - self.loop.time(), 0))
            except asyncio.TimeoutError:
                pass

    def _passed(self) -> None:
        self._kick.set()

    async def _requests(self, reader: asyncio.StreamReader, up: asyncio.StreamWriter, pending: dict[int, int]) -> None:
        while True:
            frame = await self._frame(reader)
            _, api_key, version, correlation_id = _HEADER.unpack_from(frame)
            if api_key == PRODUCE:
                self.produce_requests += 1
                n = self.produce_requests
                pending[correlation_id] = version
                self.outstanding += 1
                self.max_outstanding = max(self.max_outstanding, self.outstanding)
                self._passed()
                if self.corrupt(n):
                    frame = _flip_last_record_bit(frame)
            up.write(frame)

    async def _responses(self, up: asyncio.StreamReader, writer: asyncio.StreamWriter, pending: dict[int, int]) -> None:
        while True:
            frame = await self._frame(up)
            _, correlation_id = _RESPONSE.unpack_from(frame)
            version = pending.pop(correlation_id, None)
            if version is not None:
                await self._wait(lambda: not self.hold_responses())
                body = api.decode_response(PRODUCE, version, memoryview(frame)[4:])[1]
                self.answers.extend(p["error_code"] for t in body["responses"] for p in t["partition_responses"])
                self.outstanding -= 1
            writer.write(frame)
            self._passed()


def _flip_last_record_bit(frame: bytes) -> bytes:
    """The same Produce request with one bit of its (first) record batch flipped."""
    header, body = api.decode_request(memoryview(frame)[4:])
    partition = body["topic_data"][0]["partition_data"][0]
    records = bytearray(partition["records"])
    records[-1] ^= 1
    partition["records"] = bytes(records)
    return b"".join(api.encode_request(PRODUCE, header.api_version, header.correlation_id, header.client_id, body))


OUT_OF_ORDER = errors.E_OUT_OF_ORDER_SEQUENCE_NUMBER
CORRUPT_MESSAGE = errors.E_CORRUPT_MESSAGE
