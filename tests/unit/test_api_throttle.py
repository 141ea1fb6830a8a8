"""Failed-login throttling, on a hand-moved clock."""

from __future__ import annotations

from noetl_stream.api.throttle import LoginThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_throttle_blocks_a_key_after_its_failures_until_the_oldest_leaves_the_window() -> None:
    clock = Clock()
    throttle = LoginThrottle(max_failures=3, window_s=60, clock=clock)
    for step in range(3):
        assert throttle.retry_after("addr:a") == 0
        throttle.failed("addr:a")
        clock.now += 10 if step < 2 else 0
    assert throttle.retry_after("addr:a") == 40  # the first failure (t=1000) leaves at t=1060
    assert throttle.retry_after("addr:b") == 0  # other clients are not held up
    clock.now += 40
    assert throttle.retry_after("addr:a") == 0


def test_throttle_blocks_when_any_key_is_blocked_and_success_clears_its_keys() -> None:
    clock = Clock()
    throttle = LoginThrottle(max_failures=2, window_s=60, clock=clock)
    throttle.failed("addr:a", "user:u")
    throttle.failed("addr:b", "user:u")  # one name guessed from two addresses
    assert throttle.retry_after("addr:c", "user:u") > 0
    throttle.succeeded("user:u")
    assert throttle.retry_after("addr:c", "user:u") == 0
