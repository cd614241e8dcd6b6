"""`BoundedExecutor`: the threads a remote repository's I/O runs on, and `exactly`, the
check that a piece read is as long as its location says.

A remote backend that hangs holds every thread that waits on it until its timeouts fire.
Run on the gateway's shared worker threads, a few such waits starved every bucket (sfs ones
too) and the metadata work. Each remote repository therefore gets its own few threads and a
bounded queue in front of them: when both are full, new work is refused at once with
`RepositoryUnavailable` (503, retryable) instead of waiting behind a backend that does not
answer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from crossbeat.repositories.errors import CorruptData, RepositoryUnavailable

T = TypeVar("T")


class BoundedExecutor:
    """`threads` worker threads and at most `queued` more calls waiting for one."""

    def __init__(self, name: str, threads: int, queued: int) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=f"repo-{name}")
        self._slots = threading.BoundedSemaphore(threads + queued)

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue `fn(*args)`; `RepositoryUnavailable` at once if the queue is full."""
        if not self._slots.acquire(blocking=False):
            raise RepositoryUnavailable(
                f"repository {self.name!r}: too many requests waiting for its backend "
                "(it is slow or does not answer)"
            )
        try:
            future = self._pool.submit(fn, *args)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _f: self._slots.release())
        return future

    def shutdown(self) -> None:
        """Stop taking work; calls already queued still run (each is bounded by the
        backend client's timeouts), and this does not wait for them."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def exactly(stream: Iterator[bytes], length: int, repository: str, data_key: str) -> Iterator[bytes]:
    """`stream`, which must yield exactly `length` bytes: `CorruptData` instead of the bytes
    past `length`, or at its end if it is shorter. A response announces the length the
    location records; fewer bytes left the client waiting for the rest on a connection that
    stayed open, and more would be someone else's bytes."""
    got = 0
    try:
        for chunk in stream:
            got += len(chunk)
            if got > length:
                raise CorruptData(
                    repository, data_key, None,
                    f"more bytes than the {length} its location records for this range",
                )
            yield chunk
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    if got != length:
        raise CorruptData(
            repository, data_key, None,
            f"{got} bytes where its location records {length} for this range: the stored "
            "object is shorter than written",
        )
