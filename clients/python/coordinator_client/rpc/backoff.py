"""Exponential back-off with jitter (Kafka's `ExponentialBackoff`).

The n-th retry waits `initial_ms * multiplier**n`, capped at `max_ms`, times a random
factor in `[1 - jitter, 1 + jitter]`, so clients that failed together do not retry
together.
"""

from __future__ import annotations

import math
import random

__all__ = ["ExponentialBackoff"]


class ExponentialBackoff:
    def __init__(
        self,
        initial_ms: float,
        max_ms: float,
        *,
        multiplier: float = 2.0,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        if initial_ms < 0 or max_ms < initial_ms:
            raise ValueError("back-off needs 0 <= initial_ms <= max_ms")
        if multiplier < 1 or not 0 <= jitter < 1:
            raise ValueError("back-off needs multiplier >= 1 and 0 <= jitter < 1")
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.multiplier = multiplier
        self.jitter = jitter
        self._rng = rng or random.Random()
        # The exponent past which the cap applies; kept so a long run of retries never
        # computes a huge power.
        if multiplier == 1 or initial_ms == 0 or max_ms == initial_ms:
            self._max_exponent = 0.0
        else:
            self._max_exponent = math.log(max_ms / initial_ms, multiplier)

    def backoff_ms(self, attempts: int) -> float:
        """How long to wait before retry number `attempts` (0 for the first retry)."""
        exponent = min(float(max(attempts, 0)), self._max_exponent)
        term = min(self.initial_ms * math.pow(self.multiplier, exponent), self.max_ms)
        if self.jitter == 0:
            return term
        return term * self._rng.uniform(1 - self.jitter, 1 + self.jitter)
