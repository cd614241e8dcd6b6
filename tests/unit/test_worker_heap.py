"""`freeze_heap`: what is alive when it runs leaves the per-task garbage collections."""

from __future__ import annotations

import gc
import time

from crossbeat.spark import worker_heap


def test_a_frozen_heap_is_not_walked_again_and_new_garbage_still_is() -> None:
    keep = [[i] for i in range(200_000)]  # a worker's long-lived heap (tracked objects)
    try:
        worker_heap.freeze_heap()
        assert gc.get_freeze_count() >= len(keep)
        start = time.perf_counter()
        gc.collect()
        frozen_collect = time.perf_counter() - start
        gc.unfreeze()
        start = time.perf_counter()
        gc.collect()
        full_collect = time.perf_counter() - start
        assert frozen_collect < full_collect
        # garbage made after the freeze (a task's) is still collected
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()
        del keep
