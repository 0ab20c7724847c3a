"""The TCP listener and its life cycle: start, serve, drain, close."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time

from coordinator_server.server.connection import CoordinatorConnection
from coordinator_server.server.connection_limits import ConnectionSweeper
from coordinator_server.server.state import ServerState

logger = logging.getLogger(__name__)


def bind(host: str, port: int) -> tuple[socket.socket, tuple[str, int]]:
    """A listening-ready TCP socket and the address it is bound to (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    name = sock.getsockname()
    return sock, (name[0], name[1])


class CoordinatorServer:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._server: asyncio.Server | None = None
        config = state.config
        self._sweeper = ConnectionSweeper(
            state.quotas,
            idle_ms=config.connections_max_idle_ms,
            frame_read_timeout_ms=config.frame_read_timeout_ms,
            write_timeout_ms=config.response_write_timeout_ms,
        )

    async def start(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> None:
        """Serve on a socket from `bind` (bound first, so the port is known before)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: CoordinatorConnection(self.state), sock=sock, backlog=1024, ssl=ssl_context
        )
        self._sweeper.start(loop)

    async def drain(self, timeout_s: float) -> bool:
        """Stop accepting and reading; wait for the requests in flight to be answered."""
        state = self.state
        state.draining = True
        if self._server is not None:
            self._server.close()
        for connection in list(state.connections):
            connection.stop_reading()
        started = time.monotonic()
        try:
            await asyncio.wait_for(state.wait_idle(), timeout_s)
        except TimeoutError:
            pending = sum(c.inflight for c in state.connections)
            logger.warning("shutdown: %d requests still in flight after %.1f s", pending, timeout_s)
            return False
        logger.info("shutdown: in-flight requests answered in %.3f s", time.monotonic() - started)
        return True

    async def close(self) -> None:
        self._sweeper.stop()
        for connection in list(self.state.connections):
            connection.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
