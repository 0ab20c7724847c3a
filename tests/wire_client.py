"""A bare wire-contract client for tests: frames out, frames in, matched by correlation id.

Deliberately independent of the server's code paths above `coordinator_protocol/`, and of the client
library, so server tests exercise the contract itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import select
import socket
from typing import Any

from coordinator_protocol.envelope import RequestHeader, decode_response, encode_request
from coordinator_protocol.framing import FrameDecoder, encode_frame


class WireClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._correlation = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._decoder = FrameDecoder(64 * 1024 * 1024)
        self._reader_task = asyncio.create_task(self._read())
        self.arrival_order: list[int] = []

    @classmethod
    async def connect(cls, host: str, port: int) -> WireClient:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(65536):
                for payload in self._decoder.feed(data):
                    correlation_id, body = decode_response(payload)
                    self.arrival_order.append(correlation_id)
                    future = self._pending.pop(correlation_id, None)
                    if future is not None and not future.done():
                        future.set_result(body)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("connection closed"))
                    future.exception()  # a test that no longer waits for it is not an error
            self._pending.clear()

    def send(
        self, api_key: int, body: Any, *, api_version: int = 0
    ) -> asyncio.Future[dict[str, Any]]:
        correlation_id = next(self._correlation)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        header = RequestHeader(api_key, api_version, correlation_id, "test-client")
        self.writer.write(encode_frame(encode_request(header, body)))
        return future

    async def call(
        self, api_key: int, body: Any, *, api_version: int = 0, timeout: float = 10
    ) -> dict[str, Any]:
        return await asyncio.wait_for(self.send(api_key, body, api_version=api_version), timeout)

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    @property
    def closed(self) -> bool:
        """Whether the connection is closed (by the server, or by `close`)."""
        return self._reader_task.done()

    async def closed_by_server(self, timeout: float = 5) -> bool:
        """True once the server has closed the connection."""
        try:
            await asyncio.wait_for(asyncio.shield(self._reader_task), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
        self._reader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader_task


# Request bodies, as a third-party client would write them.


def commit_body(group: str, offsets: dict[tuple[str, int], int], metadata: str = "") -> Any:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": metadata,
            }
        )
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
    }


def fetch_body(
    group: str, topics: dict[str, list[int]] | None, require_stable: bool = False
) -> Any:
    return {
        "groups": [
            {
                "group_id": group,
                "member_id": None,
                "member_epoch": -1,
                "topics": None
                if topics is None
                else [{"name": t, "partition_indexes": p} for t, p in topics.items()],
            }
        ],
        "require_stable": require_stable,
    }


def commit_errors(response: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {
        (topic["name"], p["partition_index"]): p["error_code"]
        for topic in response["topics"]
        for p in topic["partitions"]
    }


def fetched_offsets(response: dict[str, Any]) -> dict[tuple[str, int], int]:
    (group,) = response["groups"]
    assert group["error_code"] == 0, group
    return {
        (topic["name"], p["partition_index"]): p["committed_offset"]
        for topic in group["topics"]
        for p in topic["partitions"]
    }


async def until(condition: Any, timeout: float = 5) -> None:
    """Wait, polling, until `condition()` holds; fail after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def hung_up(sock: socket.socket) -> bool:
    """The server has closed `sock`: seen without reading what it sent."""
    poll = select.poll()
    poll.register(sock, select.POLLERR | select.POLLHUP | select.POLLRDHUP)
    return bool(poll.poll(0))
