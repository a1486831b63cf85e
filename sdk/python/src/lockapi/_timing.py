"""The pacing of renewals and retries, the same as the Go SDK's (client/lease.go)."""

from __future__ import annotations

import random


def safety_margin(ttl: float) -> float:
    """How long before a lease's expiry the watchdog gives up renewing it:
    clock drift between this host and the store, and time for the holder to
    stop its work."""
    return ttl / 5


def attempt_timeout(ttl: float, limit: float) -> float:
    """Bounds one renewal, so that a request lost in the network leaves time
    to retry. Never below a second, so that a slow answer still counts; the
    safety deadline bounds every attempt anyway."""
    return min(max(ttl / 6, 1.0), limit)


class Backoff:
    """Exponentially growing pauses with jitter: each between half and all of
    the current step, which then doubles up to the maximum."""

    def __init__(self, base: float, maximum: float) -> None:
        self._cur = base
        self._max = maximum

    def next(self) -> float:
        d = self._cur
        self._cur = min(2 * self._cur, self._max)
        return d / 2 + random.uniform(0, d / 2)


def renew_backoff(ttl: float) -> Backoff:
    """Paces renewal retries to the TTL: the retries of one lease fit between
    TTL/3 and the safety margin."""
    base = min(max(ttl / 30, 0.005), 0.5)
    return Backoff(base, min(max(ttl / 6, base), 5.0))
