"""Keeping PySpark's per-task garbage collection cheap in reused Python workers.

PySpark's daemon runs `gc.collect()` after every task a reused worker finishes. With pyspark,
pyarrow, pandas, confluent-kafka and crossbeat loaded, a full collection walks ~110,000
objects: 70-130 ms of CPU per task, two tasks per micro-batch (the source's read and the
mapInArrow). That was most of the Python workers' CPU (0.56 cores at 20 PUT/s, on a
2-core machine) and sat between a task and the worker's next one.

`freeze_heap()` moves what is alive when it is called (modules, clients, caches: objects
that live as long as the worker) into the collector's permanent generation, so those
collections only look at what tasks allocate. Call it after importing or caching
something long-lived; it costs one collection the first time, microseconds after.
"""

from __future__ import annotations

import gc

_collected = False


def freeze_heap() -> None:
    """Collect once (so that no garbage is frozen with the heap), then `gc.freeze()`."""
    global _collected
    if not _collected:
        gc.collect()
        _collected = True
    gc.freeze()
