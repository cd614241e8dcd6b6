"""`format("crossbeat-kafka")`: a PySpark streaming source over Kafka-protocol topics.

Works the same against the embedded broker and any Apache Kafka cluster: it only uses
librdkafka (confluent-kafka). Options:
- `kafka.bootstrap.servers` (required) and `subscribe` (comma-separated topics);
- `startingOffsets`: `earliest` (default), `latest`, or JSON `{"topic": {"0": 42}}` — used
  only when the query has no checkpoint yet;
- `maxOffsetsPerTrigger`: at most this many records per micro-batch, shared between
  partitions in proportion to their backlog;
- `rowsPerTask` (default 20000): a micro-batch's partition ranges are packed into Spark
  tasks of about this many records (a partition's range is never split), so a small
  batch is one task;
- `kafka.group.id`: processed offsets are committed to this consumer group after each
  batch (lag visible with kafka-consumer-groups, kcat, …); the Spark checkpoint stays the
  source of truth, so the group trails by up to one batch;
- `pauseTopic` + `pauseKey`: while the last record for `pauseKey` in that topic says
  `{"paused": true}`, the stream makes no progress (nothing is skipped).

Rows: key binary, value binary, topic string, partition int, offset long, timestamp.

Per the PySpark model, `initialOffset`/`latestOffset`/`partitions`/`commit` run on a
long-lived driver object (holding the clients below), while each `read()` runs on an
executor from a pickled copy and opens its own consumer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
from confluent_kafka import KafkaException
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from crossbeat.spark import kafka_client
from crossbeat.spark.offsets import (
    limit_offsets,
    merge_new_partitions,
    normalise,
    ranges,
)

log = logging.getLogger(__name__)
PAUSE_REFRESH_S = 1.0
DEFAULT_ROWS_PER_TASK = 20_000


class KafkaRange(InputPartition):
    """Offset ranges [begin, until) of one or more topic partitions, read in turn by one
    Spark task in one micro-batch."""

    def __init__(self, ranges: list[tuple[str, int, int, int]]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = list(ranges)

    @property
    def rows(self) -> int:
        return sum(until - begin for _, _, begin, until in self.ranges)


def pack(ranges: list[tuple[str, int, int, int]], rows_per_task: int) -> list[KafkaRange]:
    """Group per-partition ranges into tasks of about `rows_per_task` records (a partition's
    range is never split): a small micro-batch is one task, not one per partition. Each
    task has a fixed cost (Python workers, scheduling, a task slot held while it runs), which
    dominates the small batches a low-latency pipeline runs."""
    tasks: list[KafkaRange] = []
    current: list[tuple[str, int, int, int]] = []
    rows = 0
    for r in ranges:
        if current and rows + (r[3] - r[2]) > rows_per_task:
            tasks.append(KafkaRange(current))
            current, rows = [], 0
        current.append(r)
        rows += r[3] - r[2]
    if current:
        tasks.append(KafkaRange(current))
    return tasks


class CrossbeatKafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "crossbeat-kafka"

    def schema(self) -> str:
        return kafka_client.SPARK_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        opts = {k.lower(): v for k, v in options.items()}
        self.brokers = opts.get("kafka.bootstrap.servers") or opts.get("bootstrap") or ""
        if not self.brokers:
            raise ValueError("crossbeat-kafka needs option kafka.bootstrap.servers")
        self.topics = [t.strip() for t in opts.get("subscribe", "").split(",") if t.strip()]
        if not self.topics:
            raise ValueError("crossbeat-kafka needs option subscribe (comma-separated topics)")
        self.starting = opts.get("startingoffsets", "earliest")
        if self.starting not in ("earliest", "latest"):
            try:
                self.starting_doc = normalise(orjson.loads(self.starting))
            except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError) as exc:
                raise ValueError(f"bad startingOffsets {self.starting!r}") from exc
        max_rows = opts.get("maxoffsetspertrigger")
        self.max_rows = int(max_rows) if max_rows else None
        if self.max_rows is not None and self.max_rows < 1:
            raise ValueError("maxOffsetsPerTrigger must be positive")
        try:
            self.rows_per_task = int(opts.get("rowspertask", DEFAULT_ROWS_PER_TASK))
        except ValueError as exc:
            raise ValueError("rowsPerTask must be an integer") from exc
        if self.rows_per_task < 1:
            raise ValueError("rowsPerTask must be positive")
        self.group = opts.get("kafka.group.id") or None
        self.pause_topic = opts.get("pausetopic") or None
        self.pause_key = opts.get("pausekey") or ""
        self._watermarks: kafka_client.Watermarks | None = None
        self._gate: kafka_client.PauseGate | None = None
        self._gate_checked = 0.0
        self._gate_closed = True

    # Clients are driver-only and not picklable: the copies sent to executors drop them.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_watermarks"] = None
        state["_gate"] = None
        return state

    def _wm(self) -> kafka_client.Watermarks:
        if self._watermarks is None:
            self._watermarks = kafka_client.Watermarks(self.brokers, self.group)
        return self._watermarks

    def _paused(self) -> bool:
        if self.pause_topic is None:
            return False
        if self._gate is None:
            self._gate = kafka_client.PauseGate(self.brokers, self.pause_topic, self.pause_key)
        now = time.monotonic()
        if now - self._gate_checked >= PAUSE_REFRESH_S:
            self._gate_closed = self._gate.refresh(timeout=0.5)
            self._gate_checked = now
        return self._gate_closed

    def initialOffset(self) -> dict[str, Any]:
        low, high = self._wm().offsets(self.topics)
        if self.starting == "earliest":
            return low
        if self.starting == "latest":
            return high
        start = merge_new_partitions(self.starting_doc, high, low)
        return {t: start.get(t, {}) for t in set(start) | set(high)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = normalise(start)
        try:
            if self._paused():
                return begin
            low, high = self._wm().offsets(self.topics)
        except KafkaException as exc:
            # Broker unreachable: plan no new data this trigger rather than fail the query.
            log.warning("cannot read offsets of %s: %s", self.topics, exc)
            return begin
        begin = merge_new_partitions(begin, high, low)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return limit_offsets(begin, high, max_rows)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return pack(ranges(normalise(start), normalise(end)), self.rows_per_task)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRange)
        for topic, part, begin, until in partition.ranges:
            yield from kafka_client.read_range(self.brokers, topic, part, begin, until)

    def commit(self, end: dict[str, Any]) -> None:
        if self.group is None:
            return
        try:
            self._wm().commit(normalise(end))
        except Exception as exc:  # noqa: BLE001 - lag reporting must not stop the query
            log.warning("committing offsets to group %s failed: %s", self.group, exc)

    def stop(self) -> None:
        for client in (self._watermarks, self._gate):
            if client is not None:
                client.close()
        self._watermarks = self._gate = None


def register(spark: Any) -> None:
    """Make `format("crossbeat-kafka")` available in `spark`."""
    spark.dataSource.register(CrossbeatKafkaDataSource)
