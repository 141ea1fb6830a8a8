"""Failed-login throttling: a guesser gets a few tries per window, then waits.

Counted per client address and per user name, so neither many names from one address nor one
name from many addresses guesses freely. In memory, per API process: several API processes each
allow their own share, which still bounds guessing to a small multiple.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

MAX_FAILURES = 10
WINDOW_S = 60.0
MAX_KEYS = 10_000  # the oldest keys are forgotten first: memory stays bounded under a flood


class LoginThrottle:
    def __init__(self, *, max_failures: int = MAX_FAILURES, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, *keys: str) -> float:
        """Seconds until one of `keys` may try again; 0 when none of them is blocked."""
        now = self.clock()
        wait = 0.0
        for key in keys:
            times = self._recent(key, now)
            if len(times) >= self.max_failures:
                wait = max(wait, times[0] + self.window_s - now)
        return wait

    def failed(self, *keys: str) -> None:
        now = self.clock()
        for key in keys:
            times = self._recent(key, now)
            times.append(now)
            self._failures[key] = times
        while len(self._failures) > MAX_KEYS:
            del self._failures[next(iter(self._failures))]

    def succeeded(self, *keys: str) -> None:
        for key in keys:
            self._failures.pop(key, None)

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._failures.pop(key, deque())
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if times:
            self._failures[key] = times  # re-inserted: most recently used last
        return times
