"""What the listener and its connections share: the listener's settings and the server's
state (handlers, the open connections, counters, the log of connection events).

Its own module, under both: the connections read it, the listener makes it, and neither
has to import the other for it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from coordinator_protocol.errors import ErrorCode
from coordinator_server import defaults
from coordinator_server.metrics import ServerMetrics
from coordinator_server.server.authentication import ListenerSecurity
from coordinator_server.server.connection_events import ConnectionEventLog
from coordinator_server.server.connection_limits import ConnectionQuotas, LimitedConnection
from coordinator_server.service.replies import Handler


class SlowReader(Protocol):
    """A connection whose client does not read its answers."""

    def unread_bytes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The listener's share of CoordinatorConfig (which describes each setting), with the
    server's defaults (`defaults.py`); the address defaults to any free port on the loopback,
    for a listener built in process (the server's own port is a setting)."""

    host: str = "127.0.0.1"
    port: int = 0
    max_frame_bytes: int = defaults.MAX_FRAME_BYTES
    max_connections: int = defaults.MAX_CONNECTIONS
    max_connections_per_ip: int = defaults.MAX_CONNECTIONS_PER_IP
    max_inflight_requests: int = defaults.MAX_INFLIGHT_REQUESTS
    max_inflight_request_bytes: int = defaults.MAX_INFLIGHT_REQUEST_BYTES
    max_response_bytes: int = defaults.MAX_RESPONSE_BYTES
    response_buffer_bytes: int = defaults.RESPONSE_BUFFER_BYTES
    response_buffer_max_bytes: int = defaults.RESPONSE_BUFFER_MAX_BYTES
    response_buffer_total_bytes: int = defaults.RESPONSE_BUFFER_TOTAL_BYTES
    connections_max_idle_ms: int = defaults.CONNECTIONS_MAX_IDLE_MS
    frame_read_timeout_ms: int = defaults.FRAME_READ_TIMEOUT_MS
    response_write_timeout_ms: int = defaults.RESPONSE_WRITE_TIMEOUT_MS


class ServerState:
    """What the connections share: settings, handlers, the open connections (in `quotas`,
    least recently active first), counters and the log of connection events."""

    def __init__(
        self,
        config: ServerConfig,
        handlers: Mapping[int, Handler],
        api_versions_body: Callable[[ErrorCode, str | None], dict[str, object]],
        metrics: ServerMetrics | None = None,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.config = config
        self.security = security or ListenerSecurity()
        self.handlers = handlers
        self.api_versions_body = api_versions_body
        self.draining = False
        self.metrics = metrics or ServerMetrics()
        self.events = ConnectionEventLog(self.metrics)
        self.quotas = ConnectionQuotas(
            config.max_connections, config.max_connections_per_ip, self.events
        )
        self.connections = self.quotas.connections
        # The connections whose client does not read its answers (their transport paused
        # them): what they hold unread counts against response_buffer_total_bytes.
        self.slow_readers: set[SlowReader] = set()
        self._idle = asyncio.Event()

    def unread_bytes(self) -> int:
        """The answers the slow readers hold unread, together."""
        return sum(reader.unread_bytes() for reader in self.slow_readers)

    def connection_idle(self, connection: LimitedConnection) -> None:
        if self.draining and all(c.inflight == 0 for c in self.connections):
            self._idle.set()

    def connection_closed(self, connection: LimitedConnection) -> None:
        self.connection_idle(connection)

    def requests_in_flight(self) -> int:
        return sum(connection.inflight for connection in self.connections)

    async def wait_idle(self) -> None:
        if all(c.inflight == 0 for c in self.connections):
            return
        self._idle.clear()
        await self._idle.wait()
