"""confluent-kafka calls the streaming source makes (no pyspark here, testable alone)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from crossbeat.errors import CrossbeatError
from crossbeat.spark.offsets import Offsets
from crossbeat.spark.worker_heap import freeze_heap

log = logging.getLogger(__name__)

ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)
SPARK_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
)


class SourceError(CrossbeatError):
    """The Kafka-protocol source cannot read what Spark asked for."""


def consumer(brokers: str, group: str | None = None, **extra: Any) -> Consumer:
    conf: dict[str, Any] = {
        "bootstrap.servers": brokers,
        # assign() never joins a group, but librdkafka wants an id for the consumer object.
        "group.id": group or f"crossbeat-spark-reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }
    conf.update(extra)
    return Consumer(conf)


class Watermarks:
    """Driver-side: partitions, low/high watermarks, and consumer-group commits."""

    def __init__(self, brokers: str, group: str | None, timeout: float = 10.0) -> None:
        self._consumer = consumer(brokers, group)
        self._timeout = timeout

    def partitions(self, topic: str) -> list[int]:
        meta = self._consumer.list_topics(topic, timeout=self._timeout).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return []
        return sorted(meta.partitions)

    def offsets(self, topics: list[str]) -> tuple[Offsets, Offsets]:
        """(earliest, latest) for every partition of `topics` (missing topics: none)."""
        low: Offsets = {}
        high: Offsets = {}
        for topic in topics:
            for p in self.partitions(topic):
                lo, hi = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=self._timeout, cached=False
                )
                low.setdefault(topic, {})[str(p)] = max(0, lo)
                high.setdefault(topic, {})[str(p)] = max(0, hi)
        return low, high

    def commit(self, offsets: Offsets) -> None:
        """Commit `offsets` (next offsets to read) to the group, for ordinary lag tools.

        Asynchronous: the commit only reports progress (the Spark checkpoint is the truth),
        so the micro-batch does not wait a broker round trip for it."""
        tps = [TopicPartition(t, int(p), o) for t, parts in offsets.items() for p, o in parts.items()]
        if tps:
            self._consumer.commit(offsets=tps, asynchronous=True)
            self._consumer.poll(0)  # serve callbacks of earlier commits

    def close(self) -> None:
        self._consumer.close()


class PauseGate:
    """Reads a control topic whose records `{..., "paused": bool}` are keyed by a name; the
    last record for our key says whether the stream may advance. Read incrementally.

    Until the topic has been read to its end once, the state is unknown and `refresh`
    answers "paused": a restarted query must not run ahead of a pause it has not seen.
    """

    SYNC_TIMEOUT_S = 10.0

    def __init__(self, brokers: str, topic: str, key: str) -> None:
        self.topic = topic
        self.key = key.encode()
        self.paused = False
        self._consumer = consumer(brokers)
        self._partitions: list[int] | None = None
        self._synced = False

    def refresh(self, timeout: float = 0.5) -> bool:
        """Read new control records; True while the stream must not advance."""
        if self._partitions is None:
            meta = self._consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return False  # no control topic: nobody ever paused anything
            self._partitions = sorted(meta.partitions)
            self._consumer.assign(
                [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self._partitions]
            )
        deadline = time.monotonic() + (timeout if self._synced else self.SYNC_TIMEOUT_S)
        at_end: set[int] = set()
        while time.monotonic() < deadline:
            # Once synced, take only what librdkafka has already fetched in the background:
            # a blocking poll would add its timeout to every micro-batch that checks the gate.
            msg = self._consumer.poll(0 if self._synced else 0.1)
            if msg is None:
                if self._synced:
                    break
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition() or 0)
                    if len(at_end) >= len(self._partitions):
                        self._synced = True
                        break
                continue
            if msg.key() == self.key:
                try:
                    self.paused = bool(orjson.loads(msg.value() or b"{}").get("paused"))
                except orjson.JSONDecodeError:
                    log.warning("ignoring a malformed control record at offset %s", msg.offset())
        if not self._synced:
            log.warning("control topic %s not read to its end yet: holding the stream", self.topic)
            return True
        return self.paused

    def close(self) -> None:
        self._consumer.close()


def read_range(
    brokers: str, topic: str, partition: int, begin: int, until: int,
    *, batch_rows: int = 10_000, stall_timeout: float = 60.0,
) -> Iterator[pa.RecordBatch]:
    """Records [begin, until) of one partition as Arrow batches of ARROW_SCHEMA.

    Offsets may have holes (compaction, control records): reading stops at the first
    record at or past `until - 1`, or at end of partition once the position reaches
    `until`. No progress for `stall_timeout` seconds is an error (Spark retries the task).
    """
    c = _reader(brokers)
    try:
        c.assign([TopicPartition(topic, partition, begin)])
        cols: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
        last_progress = time.monotonic()
        nxt = begin
        while nxt < until:
            msgs = c.consume(num_messages=min(batch_rows, until - nxt), timeout=0.05)
            if not msgs:
                if time.monotonic() - last_progress > stall_timeout:
                    raise SourceError(f"{topic}[{partition}]: no records at {nxt} (want {until})")
                continue
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pos = c.position([TopicPartition(topic, partition)])[0].offset
                        if pos >= until:
                            nxt = until
                        continue
                    raise SourceError(f"{topic}[{partition}]: {err}")
                off = msg.offset()
                assert off is not None
                if msg.topic() != topic or msg.partition() != partition or off < begin:
                    continue  # left over from the reader's previous assignment
                if off >= until:
                    nxt = until
                    break
                _, ts = msg.timestamp()
                cols["key"].append(msg.key())
                cols["value"].append(msg.value())
                cols["topic"].append(topic)
                cols["partition"].append(partition)
                cols["offset"].append(off)
                cols["timestamp"].append(ts * 1000 if ts and ts > 0 else None)
                nxt = off + 1
                last_progress = time.monotonic()
            if len(cols["offset"]) >= batch_rows:
                yield pa.RecordBatch.from_pydict(cols, schema=ARROW_SCHEMA)
                cols = {name: [] for name in ARROW_SCHEMA.names}
        if cols["offset"]:
            yield pa.RecordBatch.from_pydict(cols, schema=ARROW_SCHEMA)
    except KafkaException as exc:
        _drop_reader(brokers)
        raise SourceError(f"{topic}[{partition}]: {exc}") from exc
    except BaseException:
        _drop_reader(brokers)
        raise


# One reading consumer per Python worker and broker list, reused across tasks: creating
# one (connections, metadata) costs far more than reading a small batch. Workers run one
# task at a time, so no locking is needed.
_READERS: dict[str, Consumer] = {}


def _reader(brokers: str) -> Consumer:
    if brokers not in _READERS:
        # Ranges are read only up to offsets known to exist, so the broker never needs to
        # hold a fetch open; and librdkafka keeps one fetch in flight per broker, so a
        # fetch long-polling past the end of the previous range (500 ms by default) would
        # delay the first fetch of the next one by that much.
        extra: dict[str, Any] = {"fetch.wait.max.ms": 10}
        _READERS[brokers] = consumer(brokers, None, **extra)
        freeze_heap()  # the worker's modules and this reader live as long as the worker
    return _READERS[brokers]


def _drop_reader(brokers: str) -> None:
    c = _READERS.pop(brokers, None)
    if c is not None:
        c.close()


def close_readers() -> None:
    """Close this process's cached range readers (in a Spark worker they live as long as
    the worker; a driver or test that read ranges itself closes them when done)."""
    for brokers in list(_READERS):
        _drop_reader(brokers)
