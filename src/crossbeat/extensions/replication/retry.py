"""Exponential backoff bounded by a number of attempts and by elapsed time."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from crossbeat.extensions.replication.errors import ReplicationError
from crossbeat.extensions.replication.settings import RetrySettings

T = TypeVar("T")


def backoff_delay(settings: RetrySettings, attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Delay before attempt `attempt + 1`: min * factor^(attempt-1), capped, ± jitter."""
    base = min(settings.backoff_max_s, settings.backoff_min_s * settings.factor ** (attempt - 1))
    return max(0.0, base * (1 + settings.jitter * (2 * rand() - 1)))


def with_retries(
    settings: RetrySettings,
    fn: Callable[[], T],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[T | None, ReplicationError | None, int]:
    """Call `fn` until it returns, retrying retryable ReplicationErrors with backoff.

    Returns (result, None, attempts) on success, or (None, last error, attempts) once an
    error is not retryable, `max_attempts` is reached, or the next wait would pass
    `max_seconds` since the first attempt.
    """
    start = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn(), None, attempt
        except ReplicationError as exc:
            if not exc.retryable or attempt >= settings.max_attempts:
                return None, exc, attempt
            delay = backoff_delay(settings, attempt)
            if clock() - start + delay > settings.max_seconds:
                return None, exc, attempt
            sleep(delay)
