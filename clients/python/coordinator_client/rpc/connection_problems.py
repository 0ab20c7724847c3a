"""What went wrong reaching a coordinator: each problem said in one short phrase, logged at
WARNING as it happens, with back-off, and remembered for the timeout the caller sees.

A client pointed at the wrong place (a port nobody listens on, a stopped server, a Kafka
broker, a TLS listener it does not trust) retries within each call's deadline, so the same
problem recurs every back-off. The first occurrence at an address is logged at once; the
same problem again is logged at most once per `interval_s`, with the count of repeats left
out since the last line; a different problem is logged at once. The first success after a
logged problem is logged at INFO, so the log says when it ended.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_WARNING_INTERVAL_S",
    "ConnectionProblems",
    "connect_cause",
    "not_a_coordinator",
]

log = logging.getLogger(__name__)

DEFAULT_WARNING_INTERVAL_S: Final = 10.0
"""At most one WARNING line per address and problem in this many seconds."""


def not_a_coordinator(host: str, port: int, detail: str) -> str:
    """The cause of a peer that answered in something other than the coordinator protocol
    (a Kafka broker reads our frame as a malformed Kafka request and closes, or answers)."""
    return (
        f"the peer at {host}:{port} does not speak the coordinator protocol "
        f"(is it a Kafka broker?): {detail}"
    )


def connect_cause(error: BaseException) -> str:
    """A short phrase for why a connection could not be opened."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"TLS handshake failed: certificate verify failed: {error.verify_message}"
    if isinstance(error, ssl.SSLError):
        return f"TLS handshake failed: {error.reason or error}"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


@dataclass
class _Address:
    cause: str = ""
    logged_at: float = 0.0
    repeats: int = 0
    warned: bool = False


class ConnectionProblems:
    """The connection problems of one client, per server address (at most `max_addresses`
    remembered, the least recently troubled forgotten first)."""

    def __init__(
        self,
        *,
        max_addresses: int,
        interval_s: float = DEFAULT_WARNING_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_addresses < 1:
            raise ValueError("max_addresses must be at least 1")
        self.interval_s = interval_s
        self._clock = clock
        self._max_addresses = max_addresses
        self._addresses: OrderedDict[tuple[str, int], _Address] = OrderedDict()
        self.last_cause: str | None = None
        """The latest problem at any address, for timeout messages."""

    def cause(self, address: tuple[str, int]) -> str | None:
        """The latest problem at `address`, if it has had one since it last worked."""
        entry = self._addresses.get(address)
        return entry.cause if entry is not None and entry.cause else None

    def failed(self, address: tuple[str, int], cause: str) -> None:
        """`cause` happened at `address`: log it unless the same was logged lately."""
        self.last_cause = cause
        entry = self._addresses.get(address)
        if entry is None:
            entry = self._addresses[address] = _Address()
            while len(self._addresses) > self._max_addresses:
                self._addresses.popitem(last=False)
        self._addresses.move_to_end(address)
        now = self._clock()
        if entry.warned and entry.cause == cause and now - entry.logged_at < self.interval_s:
            entry.repeats += 1
            return
        repeats = f" ({entry.repeats} more times since the last warning)" if entry.repeats else ""
        log.warning("coordinator %s:%d: %s%s", address[0], address[1], cause, repeats)
        entry.cause = cause
        entry.logged_at = now
        entry.repeats = 0
        entry.warned = True

    def succeeded(self, address: tuple[str, int]) -> None:
        """`address` answered: a problem logged there is over."""
        entry = self._addresses.pop(address, None)
        if not any(other.cause for other in self._addresses.values()):
            self.last_cause = None
        if entry is not None and entry.warned:
            log.info(
                "coordinator %s:%d: reached again%s",
                address[0],
                address[1],
                f" ({entry.repeats} failures not logged)" if entry.repeats else "",
            )
