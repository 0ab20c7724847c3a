"""Connections refused or closed by the server: counted by reason, logged with back-off.

A few bad clients can make thousands of such events a second (10,000 idle sockets refused,
a fuzzer's broken frames); a line per event would flood the log and cost more than the
event itself. The first event after a quiet interval is logged at once, with its peer;
the ones that follow within `LOG_INTERVAL_S` are only counted, and one line with the counts
by reason closes the interval. The metrics count every event.
"""

from __future__ import annotations

import logging
from collections import Counter
from enum import StrEnum
from time import monotonic
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from coordinator_server.metrics import ServerMetrics

logger = logging.getLogger(__name__)

LOG_INTERVAL_S: Final = 10.0
"""The longest the log stays silent about connection events once one was logged."""


class RefusalReason(StrEnum):
    """Why a new connection was closed as soon as it was accepted."""

    MAX_CONNECTIONS = "max_connections"
    MAX_CONNECTIONS_PER_IP = "max_connections_per_ip"
    SHUTTING_DOWN = "shutting_down"


class ServerCloseReason(StrEnum):
    """Why the server closed an open connection."""

    # Closed to make room for a new connection under max.connections(.per.ip).
    EVICTED = "evicted"
    # Nothing in flight and no request for connections.max.idle.ms.
    IDLE = "idle"
    # A frame that started did not arrive whole within --frame-read-timeout-ms.
    FRAME_TIMEOUT = "frame_timeout"
    # Answers left unread for --response-write-timeout-ms.
    WRITE_TIMEOUT = "write_timeout"
    # Answers waiting for the client beyond --response-buffer-max-bytes.
    RESPONSE_BUFFER_FULL = "response_buffer_full"
    # Broken framing or a malformed request header.
    MALFORMED_FRAME = "malformed_frame"
    # The peer reset the connection or the socket failed.
    CONNECTION_ERROR = "connection_error"
    # A refused SASL handshake or authentication, answered after the failed-authentication
    # delay (KIP-306).
    AUTHENTICATION_FAILED = "authentication_failed"
    # A request that does not belong in the SASL exchange (any other API before the client
    # is authenticated), or one after the session expired without re-authentication.
    NOT_AUTHENTICATED = "not_authenticated"


# What happens to well-behaved clients too; the rest is worth a WARNING.
_ROUTINE: Final = frozenset({ServerCloseReason.IDLE, ServerCloseReason.CONNECTION_ERROR})


class ConnectionEventLog:
    def __init__(self, metrics: ServerMetrics, interval_s: float = LOG_INTERVAL_S) -> None:
        self._metrics = metrics
        self._interval_s = interval_s
        # Events since the last line (logged at `_last_line_at`), by (what happened,
        # reason); the interval in which events are counted rather than logged ends at
        # `_quiet_until`.
        self._counts: Counter[tuple[str, StrEnum]] = Counter()
        self._last_line_at = 0.0
        self._quiet_until = 0.0

    def refused(self, reason: RefusalReason, peer: str, detail: str) -> None:
        self._metrics.connections_refused[reason] += 1
        self._note("refused", reason, peer, detail)

    def closed(self, reason: ServerCloseReason, peer: str, detail: str) -> None:
        self._metrics.connections_closed[reason] += 1
        self._note("closed", reason, peer, detail)

    def _note(self, what: str, reason: StrEnum, peer: str, detail: str) -> None:
        now = monotonic()
        if now < self._quiet_until:
            self._counts[what, reason] += 1
            return
        self._last_line_at = now
        self._quiet_until = now + self._interval_s
        logger.log(
            logging.INFO if reason in _ROUTINE else logging.WARNING,
            "connection from %s %s (%s): %s; further connection events are counted and "
            "logged every %.0f s",
            peer,
            what,
            reason,
            detail,
            self._interval_s,
        )

    def flush(self, now: float, *, force: bool = False) -> None:
        """Log the counts of the interval that ended (all of them when `force`)."""
        if not self._counts or (now < self._quiet_until and not force):
            return
        counts, self._counts = self._counts, Counter()
        since, self._last_line_at = self._last_line_at, now
        self._quiet_until = now + self._interval_s
        routine = all(reason in _ROUTINE for _, reason in counts)
        logger.log(
            logging.INFO if routine else logging.WARNING,
            "connections in the last %.1f s: %s",
            now - since,
            ", ".join(
                f"{count} {what} ({reason})" for (what, reason), count in counts.most_common()
            ),
        )
