"""One client connection: bytes in, frames, requests dispatched, responses out.

Each complete frame is dispatched at once; a response is written when it is ready, so
responses may leave in a different order than their requests (a parked request never holds
up the ones behind it). Responses that become ready together go out in one write, and a plain
callback on the response's future replaces a task per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, cast

from coordinator_server.service import RequestContext
from protocol.api_keys import ApiKey
from protocol.envelope import (
    EnvelopeError,
    RequestHeader,
    encode_body,
    encode_response,
    response_frame_of,
    split_request,
)
from protocol.errors import ApiError, ErrorCode, UnsupportedVersionError
from protocol.framing import FrameDecoder, FrameError, encode_frame
from protocol.messages import Message, error_body, parse_request

if TYPE_CHECKING:
    from coordinator_server.server.listener import ServerState

logger = logging.getLogger(__name__)


def response_error_code(body: dict[str, object]) -> int:
    """The error a response body reports, for metrics: its top-level error code, or for
    OffsetCommit (which has none) the first partition's. A response message answers the
    same with `Message.reported_error_code`, without a map being built."""
    code = body.get("error_code")
    if isinstance(code, int):
        return code
    topics = body.get("topics")
    if isinstance(topics, list) and topics:
        partitions = topics[0].get("partitions") if isinstance(topics[0], dict) else None
        if isinstance(partitions, list) and partitions and isinstance(partitions[0], dict):
            first = partitions[0].get("error_code")
            if isinstance(first, int):
                return first
    return 0


class CoordinatorConnection(asyncio.Protocol):
    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._decoder = FrameDecoder(state.config.max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        # Kept because asyncio.get_running_loop() costs a getpid() system call each time.
        # The listener makes connections on its loop.
        self._loop = asyncio.get_running_loop()
        self._peer = "?"
        self._client_host = "/"
        self._context = RequestContext("", "/")
        # Requests dispatched and not yet answered, and frames waiting for room.
        self._inflight = 0
        self._waiting: deque[bytes] = deque()
        self._reading_paused = False
        self._writing_paused = False
        # Responses ready to go out in the next write.
        self._outgoing: list[bytes] = []
        # The last response model answered with, and its (error code, encoded body).
        self._last_message: Message | None = None
        self._last_encoding: tuple[int, bytes] = (0, b"")
        self._flush_scheduled = False
        self._closed = False

    @property
    def inflight(self) -> int:
        return self._inflight + len(self._waiting)

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        # Kafka's form of a member's client host.
        self._client_host = f"/{peer[0]}" if isinstance(peer, tuple) else "/"
        self._context = RequestContext("", self._client_host)
        state = self._state
        if state.draining or len(state.connections) >= state.config.max_connections:
            state.metrics.connections_refused += 1
            logger.warning(
                "refusing connection from %s: %d open", self._peer, len(state.connections)
            )
            self._closed = True
            self._transport.abort()
            return
        state.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._waiting.clear()
        self._state.connections.discard(self)
        self._state.connection_closed(self)

    def pause_writing(self) -> None:
        # The client does not read its responses: stop reading its requests until it does.
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            self._protocol_violation(str(exc))
            return
        if self._waiting or self._inflight + len(frames) > self._state.config.max_inflight_requests:
            self._waiting.extend(frames)
            self._admit_waiting()
        else:
            for payload in frames:
                self._dispatch(payload)
                if self._closed:
                    return
        self._update_reading()

    # Requests.

    def _admit_waiting(self) -> None:
        limit = self._state.config.max_inflight_requests
        while self._waiting and self._inflight < limit and not self._closed:
            self._dispatch(self._waiting.popleft())

    def _dispatch(self, payload: bytes) -> None:
        try:
            header, body = split_request(payload)
        except EnvelopeError as exc:
            self._protocol_violation(str(exc))
            return
        started = perf_counter()
        state = self._state
        handler = state.handlers.get(header.api_key)
        try:
            request = parse_request(header, body)
        except UnsupportedVersionError as exc:
            self._respond(header, self._unsupported(header, exc), started)
            return
        except ApiError as exc:
            self._respond(header, error_body(exc.code, exc.message), started)
            return
        except EnvelopeError as exc:
            # A str in the body that is not UTF-8: not msgpack, so the connection ends.
            self._protocol_violation(str(exc))
            return
        if handler is None:
            self._respond(
                header,
                error_body(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"api_key {header.api_key} is not served by this coordinator",
                ),
                started,
            )
            return
        context = self._context
        if context.client_id != (header.client_id or ""):
            context = self._context = RequestContext(header.client_id or "", self._client_host)
        try:
            reply = handler(request, context)
        except Exception:
            logger.exception("handler for api_key %d failed", header.api_key)
            self._respond(header, error_body(ErrorCode.UNKNOWN_SERVER_ERROR, None), started)
            return
        if isinstance(reply, Message):
            self._respond_with(header, reply, started)
            return
        future = reply.future
        if future.done():
            self._reply_done(header, reply.on_error, started, future, counted=False)
            return
        self._inflight += 1
        future.add_done_callback(partial(self._reply_done, header, reply.on_error, started))

    def _unsupported(self, header: RequestHeader, exc: ApiError) -> dict[str, object]:
        if header.api_key == ApiKey.API_VERSIONS:
            # The contract: ApiVersions at an unsupported version still lists the api keys,
            # so a client can pick a version it shares with the server.
            return self._state.api_versions_body(ErrorCode.UNSUPPORTED_VERSION, exc.message)
        return error_body(ErrorCode.UNSUPPORTED_VERSION, exc.message)

    def _reply_done(
        self,
        header: RequestHeader,
        on_error: Callable[[BaseException], Message] | None,
        started: float,
        done: asyncio.Future[Message],
        *,
        counted: bool = True,
    ) -> None:
        if done.cancelled():
            error: BaseException | None = asyncio.CancelledError()
        else:
            error = done.exception()
        if error is None:
            self._respond_with(header, done.result(), started)
        elif on_error is not None:
            try:
                answer = on_error(error)
            except Exception:
                logger.exception("mapping the error of api_key %d failed", header.api_key)
                self._respond(header, error_body(ErrorCode.UNKNOWN_SERVER_ERROR, None), started)
            else:
                self._respond_with(header, answer, started)
        elif isinstance(error, asyncio.CancelledError):
            self._respond(
                header,
                error_body(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the request was cancelled"),
                started,
            )
        else:
            logger.error("request api_key %d failed", header.api_key, exc_info=error)
            self._respond(header, error_body(ErrorCode.UNKNOWN_SERVER_ERROR, None), started)
        if not counted:
            return
        self._inflight -= 1
        if self._waiting:
            self._admit_waiting()
        self._update_reading()
        if self._inflight == 0:
            self._state.connection_idle(self)

    # Responses.

    def _respond_with(self, header: RequestHeader, message: Message, started: float) -> None:
        """Answer with a response model. The last one's encoding is kept: responses that are
        shared values (a heartbeat's answer is one of a few) are encoded once, not once per
        request."""
        if message is self._last_message:
            code, encoded = self._last_encoding
        else:
            code = message.reported_error_code()
            encoded = encode_body(message)
            # Holding the message keeps its identity from being reused by another object.
            self._last_message = message
            self._last_encoding = (code, encoded)
        self._state.metrics.request_done(header.api_key, code, perf_counter() - started)
        if self._closed:
            return
        self._outgoing.append(response_frame_of(header.correlation_id, encoded))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _respond(self, header: RequestHeader, body: dict[str, object], started: float) -> None:
        self._state.metrics.request_done(
            header.api_key, response_error_code(body), perf_counter() - started
        )
        if self._closed:
            return
        self._outgoing.append(encode_frame(encode_response(header.correlation_id, body)))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._closed or self._transport is None or not self._outgoing:
            self._outgoing.clear()
            return
        data = b"".join(self._outgoing) if len(self._outgoing) > 1 else self._outgoing[0]
        self._outgoing.clear()
        self._transport.write(data)

    # Flow control and closing.

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closed:
            return
        should_pause = (
            self._writing_paused
            or self._state.draining
            or self._inflight >= self._state.config.max_inflight_requests
            or bool(self._waiting)
        )
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def _protocol_violation(self, reason: str) -> None:
        self._state.metrics.malformed_frames += 1
        logger.warning("closing connection from %s: %s", self._peer, reason)
        self.abort()

    def stop_reading(self) -> None:
        """Graceful shutdown: take no new requests, keep answering the ones in flight."""
        self._update_reading()

    def close(self) -> None:
        """Close after the responses already produced are written."""
        if self._closed:
            return
        self._flush()
        self._closed = True
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        self._closed = True
        self._outgoing.clear()
        if self._transport is not None:
            self._transport.abort()
