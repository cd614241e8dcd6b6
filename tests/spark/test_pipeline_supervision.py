"""The pipelines' supervision loop restarts a query whose batch failed, trying again when
a restart fails (the broker still away: the pipeline process exited), even when Spark
leaves the failed query "active": with async progress tracking (as the pipelines run) and a Python
source, a failed query kept isActive true with no thread running it, and the pipeline
stalled for good after a broker outage (no restart, nothing logged). Real local Spark, a
Python streaming source of counting numbers, and a batch function that fails once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]
FAIL_FROM = 3  # the first batch whose numbers reach this fails, while the flag file exists


def _source() -> Any:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class Numbers(DataSourceStreamReader):
        def __init__(self) -> None:
            self.began = time.monotonic()

        def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's names
            return {"n": 0}

        def latestOffset(self) -> dict[str, int]:  # noqa: N802
            return {"n": int((time.monotonic() - self.began) * 5)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            return [InputPartition((start["n"], end["n"]))]

        def read(self, partition: Any) -> Iterator[tuple[int]]:
            first, end = partition.value
            for i in range(first, end):
                yield (i,)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class NumbersSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "crossbeat-test-numbers"

        def schema(self) -> str:
            return "v long"

        def streamReader(self, schema: Any) -> Any:  # noqa: N802
            return Numbers()

    return NumbersSource


def _start(spark: Any, checkpoint: Path, flag: Path) -> Any:
    import pyarrow as pa

    flag_path = str(flag)

    def fails_once(batches: Iterator[Any]) -> Iterator[Any]:
        import os

        for batch in batches:
            values = batch.column("v").to_pylist()
            if values and max(values) >= FAIL_FROM and os.path.exists(flag_path):
                os.unlink(flag_path)  # once: the restarted query runs on
                raise RuntimeError("a batch that cannot finish (the broker away, say)")
            yield pa.RecordBatch.from_pydict({"n": [len(values)]})

    return (spark.readStream.format("crossbeat-test-numbers").load()
            .mapInArrow(fails_once, "n long").writeStream.queryName("supervised").format("noop")
            .option("asyncProgressTrackingEnabled", "true")  # as pipelines._start
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def test_a_failed_query_left_active_by_spark_is_restarted(spark: Any, tmp_path: Path) -> None:
    from crossbeat.spark.pipelines import supervise

    spark.dataSource.register(_source())
    flag = tmp_path / "fail"
    flag.touch()
    first = _start(spark, tmp_path / "checkpoint", flag)
    restarted: list[Any] = []
    attempts: list[str] = []

    def restart(name: str) -> Any:
        attempts.append(name)
        if len(attempts) == 1:  # as when the broker is still away: the loop must survive it
            raise RuntimeError("cannot create topic crossbeat-replication: no answer in 30s")
        restarted.append(_start(spark, tmp_path / "checkpoint", flag))
        return restarted[-1]

    stop = threading.Event()
    loop = threading.Thread(target=supervise, args=(spark, [first], restart, stop),
                            kwargs={"restart_delay_s": 0.1})
    loop.start()
    try:
        wait_until(lambda: first.exception() is not None, timeout=120, interval=0.2,
                   what="the first query's batch failing")
        wait_until(lambda: bool(restarted) and len(restarted[-1].recentProgress) >= 3, timeout=120,
                   interval=0.2, what="the query restarted and running batches")
        assert restarted[-1].isActive and restarted[-1].exception() is None
        assert attempts == ["supervised", "supervised"]  # the failed restart was tried again
        assert [q.name for q in spark.streams.active] == ["supervised"]
    finally:
        stop.set()
        loop.join(timeout=60)
    assert not loop.is_alive()
    assert not any(q.name == "supervised" for q in spark.streams.active)
