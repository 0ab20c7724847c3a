"""How many connections, from where, and for how long: Kafka's ConnectionQuotas
(max.connections, max.connections.per.ip) and the periodic sweep of Kafka's Selector
(connections.max.idle.ms), with a frame read timeout and a write timeout beside it.

The connections are kept in order of activity, least recently active first (as Kafka's
Selector keeps them in an access-ordered map): a connection moves to the end when a read
completes requests, and when the sweep finds it busy. So the connection that has been idle
longest is found at once when a limit is reached, however many are open, and a flood of new
connections costs no scan per connection.

Timeouts are checked by one sweep over the connections every `sweep_interval_s` (at most a
second), not by a timer per connection or per request: the request path only stores the
time once per read.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from time import monotonic
from typing import Final, Protocol

from coordinator_server.server.connection_events import (
    ConnectionEventLog,
    RefusalReason,
    ServerCloseReason,
)


class LimitedConnection(Protocol):
    """What the server's parts besides the connection itself (the quotas, the sweeper, the
    listener's drain and close) read, set and call on a connection: a
    `CoordinatorConnection`, named by that use so that they need not import the connection,
    which imports them."""

    host: str
    reading_paused: bool
    last_request_at: float
    frame_started_at: float
    write_blocked_since: float

    @property
    def inflight(self) -> int: ...

    def expire(self, reason: ServerCloseReason, detail: str) -> None: ...

    def stop_reading(self) -> None: ...

    def close(self) -> None: ...


EVICTION_MIN_IDLE_S: Final = 1.0
"""A connection idle this long may be closed to make room for a new one. Younger ones are
spared: a client that just connected or just sent a request is not a squatter, and a flood
of new connections must not push out each other (the newcomer is refused instead)."""

MAX_SWEEP_INTERVAL_S: Final = 1.0
MIN_SWEEP_INTERVAL_S: Final = 0.05


def sweep_interval_s(*timeouts_ms: int) -> float:
    """A quarter of the shortest timeout, within 50 ms and a second: a timeout fires at most
    a quarter late, and 10,000 connections cost a few milliseconds of sweep a second."""
    shortest_s = min(timeouts_ms) / 1000
    return min(MAX_SWEEP_INTERVAL_S, max(MIN_SWEEP_INTERVAL_S, shortest_s / 4))


class ConnectionQuotas:
    """The open connections, all and by address, least recently active first."""

    def __init__(
        self, max_connections: int, max_connections_per_ip: int, events: ConnectionEventLog
    ) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.events = events
        self.connections: OrderedDict[LimitedConnection, None] = OrderedDict()
        self._by_host: dict[str, OrderedDict[LimitedConnection, None]] = {}

    def admit(self, connection: LimitedConnection, now: float) -> RefusalReason | None:
        """Take a new connection, closing the one idle longest of a full scope (its address,
        then all) to make room; or say why it is refused."""
        host = connection.host
        peers = self._by_host.get(host)
        if (
            peers is not None
            and len(peers) >= self.max_connections_per_ip
            and not self._evict_idlest(peers, now, f"{len(peers)} open from {host}")
        ):
            return RefusalReason.MAX_CONNECTIONS_PER_IP
        if len(self.connections) >= self.max_connections and not self._evict_idlest(
            self.connections, now, f"{len(self.connections)} open"
        ):
            return RefusalReason.MAX_CONNECTIONS
        # An eviction may have emptied, and so dropped, the address's map.
        peers = self._by_host.get(host)
        if peers is None:
            peers = self._by_host[host] = OrderedDict()
        peers[connection] = None
        self.connections[connection] = None
        return None

    def connections_from(self, host: str) -> int:
        peers = self._by_host.get(host)
        return 0 if peers is None else len(peers)

    def touch(self, connection: LimitedConnection) -> None:
        """`connection` was active just now (its `last_request_at`)."""
        self.connections.move_to_end(connection)
        peers = self._by_host.get(connection.host)
        if peers is not None:
            peers.move_to_end(connection)

    def release(self, connection: LimitedConnection) -> None:
        """Forget a closed connection (again: nothing happens)."""
        if self.connections.pop(connection, False) is False:
            return
        host = connection.host
        peers = self._by_host.get(host)
        if peers is not None:
            peers.pop(connection, None)
            if not peers:
                del self._by_host[host]

    def _evict_idlest(
        self, scope: OrderedDict[LimitedConnection, None], now: float, detail: str
    ) -> bool:
        idle_since = now - EVICTION_MIN_IDLE_S
        victim = None
        for candidate in scope:
            if candidate.last_request_at > idle_since:
                # In order of activity: every one after this is younger still.
                break
            if not candidate.inflight:
                victim = candidate
                break
        if victim is None:
            return False
        victim.expire(
            ServerCloseReason.EVICTED, f"closed to make room for a new connection: {detail}"
        )
        return True


class ConnectionSweeper:
    """Closes connections idle past `idle_s`, with a frame started longer than `frame_s` ago,
    or whose answers have waited for the client longer than `write_s`, and logs the counts
    of connection events (see ConnectionEventLog) when their interval is over."""

    def __init__(
        self,
        quotas: ConnectionQuotas,
        *,
        idle_ms: int,
        frame_read_timeout_ms: int,
        write_timeout_ms: int,
    ) -> None:
        self._quotas = quotas
        self._idle_s = idle_ms / 1000
        self._frame_s = frame_read_timeout_ms / 1000
        self._write_s = write_timeout_ms / 1000
        self.interval_s = sweep_interval_s(idle_ms, frame_read_timeout_ms, write_timeout_ms)
        self._handle: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = loop.call_later(self.interval_s, self._run, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._quotas.events.flush(monotonic(), force=True)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        now = monotonic()
        self.sweep(now)
        self._quotas.events.flush(now)
        self._handle = loop.call_later(self.interval_s, self._run, loop)

    def sweep(self, now: float) -> None:
        quotas = self._quotas
        idle_before = now - self._idle_s
        frame_before = now - self._frame_s
        write_before = now - self._write_s
        expired: list[tuple[LimitedConnection, ServerCloseReason, str]] = []
        busy: list[LimitedConnection] = []
        for connection in quotas.connections:
            blocked_since = connection.write_blocked_since
            if blocked_since and blocked_since < write_before:
                expired.append(
                    (
                        connection,
                        ServerCloseReason.WRITE_TIMEOUT,
                        f"answers unread for {now - blocked_since:.1f} s",
                    )
                )
                continue
            frame_started = connection.frame_started_at
            if frame_started:
                if connection.reading_paused:
                    # The server holds the rest of the frame back; its clock starts again.
                    connection.frame_started_at = now
                elif frame_started < frame_before:
                    expired.append(
                        (
                            connection,
                            ServerCloseReason.FRAME_TIMEOUT,
                            f"a frame unfinished after {now - frame_started:.1f} s",
                        )
                    )
                    continue
            if connection.inflight:
                busy.append(connection)
            elif connection.last_request_at < idle_before:
                expired.append(
                    (
                        connection,
                        ServerCloseReason.IDLE,
                        f"idle for {now - connection.last_request_at:.1f} s",
                    )
                )
        # A request in flight is activity: idle time counts from when it was last seen busy.
        for connection in busy:
            connection.last_request_at = now
            quotas.touch(connection)
        for connection, reason, detail in expired:
            connection.expire(reason, detail)
