"""Replication errors: each says whether trying again may help."""

from __future__ import annotations

from typing import Any

from crossbeat.errors import CrossbeatError

# Answers that say the endpoint as a whole cannot take requests now (a proxy without a
# backend, a gateway unavailable or throttling, a full disk), not that one request was wrong.
UNAVAILABLE_STATUSES = frozenset({502, 503, 504, 507})
UNAVAILABLE_CODES = frozenset({"ServiceUnavailable", "SlowDown", "InsufficientCapacity"})


class ReplicationError(CrossbeatError):
    """A replication step failed. `retryable` errors are retried with backoff (bounded),
    the others fail the version for that site at once (until `crossbeat replication retry`).

    `unavailable` errors (implying `retryable`) say an endpoint did not answer or cannot
    take requests at all: nothing is wrong with the version, so once its retries are spent
    the processor holds it until the endpoint answers again instead of failing it."""

    def __init__(
        self, message: str, *, retryable: bool, status: int | None = None,
        unavailable: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable or unavailable
        self.status = status
        self.unavailable = unavailable


class RevisionMismatch(CrossbeatError):
    """A compare-and-set lost the race: `current` is the metadata as it is now."""

    def __init__(self, current: dict[str, Any]) -> None:
        super().__init__("metadata revision changed")
        self.current = current


def http_error(what: str, status: int, body: str) -> ReplicationError:
    """Classify an HTTP failure: 5xx, 429 and 408 are worth retrying, other 4xx are not."""
    retryable = status >= 500 or status in (408, 429)
    return ReplicationError(f"{what}: HTTP {status}: {body[:300]}", retryable=retryable,
                            status=status, unavailable=status in UNAVAILABLE_STATUSES)
