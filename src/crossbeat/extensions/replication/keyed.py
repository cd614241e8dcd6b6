"""Parallel work that keeps per-key order: items of one key run one after another, in the
order given; different keys run concurrently on a bounded thread pool."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_keyed(
    items: Sequence[T],
    key: Callable[[T], Hashable],
    fn: Callable[[T], R],
    concurrency: int,
) -> list[R]:
    """`fn` over `items`; results grouped by key, each group in input order.

    The first exception raised by `fn` propagates after every group has finished.
    """
    groups: dict[Hashable, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    if not groups:
        return []

    def run_group(group: list[T]) -> list[R]:
        return [fn(item) for item in group]

    if len(groups) == 1 or concurrency <= 1:
        return [r for group in groups.values() for r in run_group(group)]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(groups))) as pool:
        futures = [pool.submit(run_group, group) for group in groups.values()]
        return [r for fut in futures for r in fut.result()]
