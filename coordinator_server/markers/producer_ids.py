"""`ClusterProducerIds`: producer ids handed out by the Kafka cluster itself, kept ready.

Our producers write to the data cluster beside Kafka's own producers and beside other
deployments of this server, and a broker tells producers apart by producer id alone: two
writers given the same id fence each other's batches and markers (INVALID_PRODUCER_EPOCH)
and may even end each other's transactions. A range of our own cannot be proven apart from
every other deployment's, so by default each new id is the cluster's own: an InitProducerId
without a transactional id, as an idempotent producer asks for one, answered by any broker
from the controller's blocks (Kafka's ProducerIdManager). No Kafka producer and no other
deployment ever gets it.

One such request per id would put a round trip to the cluster in front of every new
transactional id, so `ready` ids are kept in hand and asked for again, `ready` at once,
whenever fewer than half of them are left. An id taken and not used goes back
(`give_back`); an id whose use is not known (its write failed) is never handed out again.
Ids kept in hand when the server stops are lost, as Kafka loses the rest of a block.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable

__all__ = ["ClusterProducerIds", "ProducerIdsUnavailable"]

log = logging.getLogger(__name__)


class ProducerIdsUnavailable(Exception):
    """No producer id came from the cluster in time; says the last failure."""


class ClusterProducerIds:
    """A pool of the cluster's producer ids; `stop()` at the end."""

    def __init__(
        self,
        ask: Callable[[], Awaitable[int]],
        *,
        ready: int,
        timeout_s: float,
        backoff_s: float = 0.1,
        backoff_max_s: float = 2.0,
    ) -> None:
        """`ask`: one id from the cluster (raises when it hands none out). `ready`: the ids
        kept in hand, and asked for at once. `timeout_s`: how long `take` waits."""
        if ready < 1:
            raise ValueError(f"ready must be at least 1, got {ready}")
        self._ask = ask
        self._ready = ready
        self._timeout_s = timeout_s
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._ids: deque[int] = deque()
        self._filled = asyncio.Event()
        self._filling: asyncio.Task[None] | None = None
        self._stopped = False
        self.last_error: str | None = None
        # Counters, for tests and /status.
        self.asked = 0
        self.failures = 0

    @property
    def in_hand(self) -> int:
        return len(self._ids)

    def start(self) -> None:
        """Fill the pool in the background, before the first request needs it."""
        self._fill_if_low()

    def take_now(self) -> int | None:
        """An id at once, or None when none is in hand (`take` waits for one)."""
        producer_id = self._ids.popleft() if self._ids else None
        self._fill_if_low()
        return producer_id

    async def take(self) -> int:
        """An id, waiting at most `timeout_s` for the cluster; raises
        ProducerIdsUnavailable then."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        while not self._ids:
            if self._stopped:
                raise ProducerIdsUnavailable("stopping")
            self._fill_if_low()
            self._filled.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ProducerIdsUnavailable(
                    f"no producer id from the Kafka cluster in {self._timeout_s:g} s"
                    + (f": {self.last_error}" if self.last_error else "")
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._filled.wait(), remaining)
        return self._ids.popleft()

    def give_back(self, producer_id: int) -> None:
        """An id taken and never handed out (its request needed none)."""
        if len(self._ids) < self._ready:
            self._ids.appendleft(producer_id)

    async def stop(self) -> None:
        self._stopped = True
        self._filled.set()
        task, self._filling = self._filling, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _fill_if_low(self) -> None:
        if self._stopped or len(self._ids) * 2 > self._ready:
            return
        if self._filling is None or self._filling.done():
            self._filling = asyncio.get_running_loop().create_task(
                self._fill(), name="producer-ids-fill"
            )

    async def _fill(self) -> None:
        attempt = 0
        while len(self._ids) < self._ready:
            wanted = self._ready - len(self._ids)
            self.asked += wanted
            answers = await asyncio.gather(
                *(self._ask() for _ in range(wanted)), return_exceptions=True
            )
            got = [answer for answer in answers if isinstance(answer, int)]
            self._ids.extend(got)
            if got:
                self._filled.set()
            failures = [answer for answer in answers if isinstance(answer, BaseException)]
            if not failures:
                self.last_error = None
                attempt = 0
                continue
            self.failures += len(failures)
            self.last_error = repr(failures[-1])
            if not got:
                if attempt == 0 or attempt % 20 == 0:
                    log.warning(
                        "the Kafka cluster hands out no producer id now (%s); asking again",
                        self.last_error,
                    )
                await asyncio.sleep(
                    min(self._backoff_s * 2 ** min(attempt, 30), self._backoff_max_s)
                )
                attempt += 1
