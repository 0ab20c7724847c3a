"""A scripted coordinator on 127.0.0.1 for client tests.

It speaks the contract's framing and envelopes and hands each request to a handler the
test writes; each request is handled in its own task, so a handler that waits makes its
answer come out of order. A handler returns the response body, or None for no answer.
FindCoordinator is answered with `coordinator_address` (this server by default) unless the
handler answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import decode_request, encode_response
from coordinator_protocol.framing import FrameDecoder, encode_frame


@dataclass
class Received:
    api_key: int
    correlation_id: int
    body: dict[str, Any]
    connection: int
    at: float = field(default_factory=time.monotonic)


Handler = Callable[["Received"], Awaitable[dict[str, Any] | None] | dict[str, Any] | None]


class FakeCoordinator:
    def __init__(self, handler: Handler | None = None, *, node_id: int = 0) -> None:
        self.handler = handler
        self.node_id = node_id
        self.received: list[Received] = []
        self.host = "127.0.0.1"
        self.port = 0
        self.coordinator_address: tuple[str, int] | None = None
        self.connections = 0
        self.in_flight = 0
        self.max_in_flight = 0
        # The server's side of each connection, in the order they came.
        self.writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._serving: set[asyncio.Task[Any]] = set()
        self._arrived = asyncio.Event()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> FakeCoordinator:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.close_all_connections()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # The connection handlers end by themselves once their sockets are closed (asyncio
        # reports a cancelled handler as an error).
        await asyncio.wait(self._serving, timeout=5) if self._serving else None
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FakeCoordinator:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def close_all_connections(self) -> None:
        for writer in self.writers:
            writer.close()
        self.writers.clear()

    def requests(self, api_key: int) -> list[Received]:
        return [r for r in self.received if r.api_key == api_key]

    async def wait_for_requests(self, api_key: int, count: int = 1, timeout: float = 5) -> None:
        async with asyncio.timeout(timeout):
            while len(self.requests(api_key)) < count:
                await self._arrived.wait()
                self._arrived.clear()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        self.writers.append(writer)
        decoder = FrameDecoder()
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                for payload in decoder.feed(data):
                    header, body = decode_request(payload)
                    assert isinstance(body, dict)
                    received = Received(header.api_key, header.correlation_id, body, connection)
                    self.received.append(received)
                    self._arrived.set()
                    self._spawn(self._answer(received, writer))
        writer.close()

    async def _answer(self, received: Received, writer: asyncio.StreamWriter) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            body = self.handler(received) if self.handler is not None else None
            if asyncio.iscoroutine(body) or isinstance(body, asyncio.Future):
                body = await body
            if body is None and received.api_key == ApiKey.FIND_COORDINATOR:
                body = self.find_coordinator_body(received)
        finally:
            self.in_flight -= 1
        if body is not None and not writer.is_closing():
            self.send(writer, received.correlation_id, body)

    @staticmethod
    def send(writer: asyncio.StreamWriter, correlation_id: int, body: Any) -> None:
        writer.write(encode_frame(encode_response(correlation_id, body)))

    def find_coordinator_body(self, received: Received) -> dict[str, Any]:
        host, port = self.coordinator_address or (self.host, self.port)
        return {
            "coordinators": [
                {
                    "key": key,
                    "node_id": self.node_id,
                    "host": host,
                    "port": port,
                    "error_code": 0,
                    "error_message": None,
                }
                for key in received.body["keys"]
            ]
        }


def commit_answer(received: Received, code: int) -> dict[str, Any]:
    """An OffsetCommit answer giving every partition of the request `code`."""
    return {
        "topics": [
            {
                "name": topic["name"],
                "partitions": [
                    {"partition_index": p["partition_index"], "error_code": code}
                    for p in topic["partitions"]
                ],
            }
            for topic in received.body["topics"]
        ]
    }
