from __future__ import annotations

import threading
import time

from crossbeat.extensions.replication.errors import ReplicationError
from crossbeat.extensions.replication.keyed import run_keyed
from crossbeat.extensions.replication.retry import backoff_delay, with_retries
from crossbeat.extensions.replication.settings import RetrySettings


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def failing(times: int, retryable: bool = True):  # type: ignore[no-untyped-def]
    calls = [0]

    def fn() -> str:
        calls[0] += 1
        if calls[0] <= times:
            raise ReplicationError("nope", retryable=retryable)
        return "ok"

    return fn


def test_backoff_grows_exponentially_up_to_the_cap() -> None:
    s = RetrySettings(backoff_min_s=1, backoff_max_s=5, factor=2, jitter=0)
    assert [backoff_delay(s, a) for a in (1, 2, 3, 4)] == [1, 2, 4, 5]


def test_retryable_errors_are_retried_until_success() -> None:
    c = Clock()
    s = RetrySettings(max_attempts=5, backoff_min_s=1, jitter=0)
    assert with_retries(s, failing(2), sleep=c.sleep, clock=lambda: c.now) == ("ok", None, 3)
    assert c.sleeps == [1, 2]


def test_bounded_by_attempts() -> None:
    c = Clock()
    result, err, attempts = with_retries(RetrySettings(max_attempts=3, jitter=0), failing(10),
                                         sleep=c.sleep, clock=lambda: c.now)
    assert result is None and err is not None and attempts == 3


def test_bounded_by_time() -> None:
    c = Clock()
    s = RetrySettings(max_attempts=100, max_seconds=10, backoff_min_s=1, jitter=0)
    _, err, attempts = with_retries(s, failing(100), sleep=c.sleep, clock=lambda: c.now)
    assert err is not None and c.now <= 10 and attempts == 4  # waits 1+2+4, then 8 would pass 10


def test_non_retryable_fails_at_once() -> None:
    c = Clock()
    _, err, attempts = with_retries(RetrySettings(), failing(1, retryable=False),
                                    sleep=c.sleep, clock=lambda: c.now)
    assert err is not None and attempts == 1 and c.sleeps == []


def test_keyed_runs_keep_per_key_order_and_run_keys_concurrently() -> None:
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()
    active = [0]
    peak = [0]

    def fn(item: tuple[str, int]) -> tuple[str, int]:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.01)
        with lock:
            seen.append(item)
            active[0] -= 1
        return item

    items = [(k, i) for i in range(5) for k in "abcd"]
    out = run_keyed(items, lambda it: it[0], fn, concurrency=4)
    assert sorted(out) == sorted(items)
    for k in "abcd":
        assert [i for kk, i in seen if kk == k] == list(range(5))
    assert peak[0] > 1


def test_a_batch_item_refused_for_want_of_room_is_retried_as_a_single_request_is() -> None:
    """A destination's full disk (507 InsufficientCapacity) was retried for a large version
    sent alone but made a batched small one FAILED at the first try."""
    from crossbeat.extensions.replication.errors import http_error
    from crossbeat.extensions.replication.gateway import _item_error

    item = _item_error({"error": "InsufficientCapacity", "message": "full"}, "put replica")
    assert item is not None and item.retryable
    assert http_error("put replica", 507, "").retryable  # the single request's path
    refused = _item_error({"error": "AccessDenied", "message": "no"}, "put replica")
    assert refused is not None and not refused.retryable
