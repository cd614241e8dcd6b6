"""confluent-kafka calls the streaming source makes (no pyspark here, testable alone)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import orjson
import pyarrow as pa
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from crossbeat.errors import CrossbeatError
from crossbeat.populator.client_settings import RECONNECT
from crossbeat.spark.offsets import Offsets
from crossbeat.spark.worker_heap import freeze_heap

log = logging.getLogger(__name__)

# Spark's Kafka source rows, in its column order; `headers` only with includeHeaders.
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADERS_TYPE))
SPARK_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int"
)
SPARK_SCHEMA_WITH_HEADERS = SPARK_SCHEMA + ", headers array<struct<key: string, value: binary>>"

# Kafka topics no subscription pattern matches (Java's exclude.internal.topics).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class SourceError(CrossbeatError):
    """The Kafka-protocol source cannot read what Spark asked for."""


class DataLossError(SourceError):
    """Records the query should read no longer exist (failOnDataLoss=true)."""


FAIL_HINT = (
    "Some data may have been lost because it is not available in Kafka any more: either it "
    "was aged out by retention, or the topic was deleted (or recreated) before all its data "
    "was processed. If you don't want your streaming query to fail on such cases, set the "
    'source option "failOnDataLoss" to "false".'
)
WARN_HINT = (
    "Some data may have been lost because it is not available in Kafka any more: either it "
    "was aged out by retention, or the topic was deleted (or recreated) before all its data "
    "was processed. Reading continues from the earliest available offset; if you want your "
    'streaming query to fail on such cases, set the source option "failOnDataLoss" to "true".'
)


def report_loss(lost: list[str], fail: bool) -> None:
    """Raise DataLossError naming every partition in `lost` (`fail`), or log each one."""
    if not lost:
        return
    if fail:
        raise DataLossError("; ".join(lost) + ". " + FAIL_HINT)
    for message in lost:
        log.warning("%s. %s", message, WARN_HINT)


def check_settings(settings: Mapping[str, str]) -> None:
    """KafkaException with librdkafka's message if it refuses a setting (an unknown name,
    a bad value, a Java-only setting such as sasl.jaas.config). Connects to nothing."""
    if settings:
        Consumer({"group.id": "crossbeat-check", "log_level": 0, **settings}).close()


def consumer(
    brokers: str, group: str | None = None, settings: Mapping[str, str] | None = None,
    **extra: Any,
) -> Consumer:
    """A consumer with the source's fixed settings, then `extra`, then the user's
    `settings` (the `kafka.*` options, e.g. security ones; see source_options.REFUSED_KAFKA for
    those that may not override ours)."""
    conf: dict[str, Any] = {
        **RECONNECT,
        "bootstrap.servers": brokers,
        # assign() never joins a group, but librdkafka wants an id for the consumer object.
        "group.id": group or f"crossbeat-spark-reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        # Spark's Kafka source reads with the Java consumer's default, read_uncommitted;
        # librdkafka's is read_committed, which dropped aborted records and held every
        # record after an open transaction back until it ended
        "isolation.level": "read_uncommitted",
    }
    conf.update(extra)
    conf.update(settings or {})
    return Consumer(conf)


class Watermarks:
    """Driver-side: partitions, low/high watermarks, and consumer-group commits."""

    def __init__(
        self, brokers: str, group: str | None, settings: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self._consumer = consumer(brokers, group, settings)
        self._timeout = timeout

    def partitions(self, topic: str) -> list[int]:
        """The partitions of `topic`, none if it does not exist; KafkaException for any
        other error (a leader election, …), which must not pass for a deleted topic."""
        meta = self._consumer.list_topics(topic, timeout=self._timeout).topics.get(topic)
        if meta is None:
            return []
        if meta.error is not None:
            if meta.error.code() in _NO_SUCH_TOPIC:
                return []
            raise KafkaException(meta.error)
        return sorted(meta.partitions)

    def all_partitions(self) -> dict[str, list[int]]:
        """Every topic of the cluster (internal ones excluded) and its partitions."""
        topics = self._consumer.list_topics(timeout=self._timeout).topics
        out: dict[str, list[int]] = {}
        for name, meta in topics.items():
            if name in INTERNAL_TOPICS:
                continue
            if meta.error is not None and meta.error.code() not in _NO_SUCH_TOPIC:
                raise KafkaException(meta.error)
            if meta.error is None and meta.partitions:
                out[name] = sorted(meta.partitions)
        return out

    def offsets(self, partitions: dict[str, list[int]]) -> tuple[Offsets, Offsets]:
        """(earliest, latest) for every partition in `partitions` ({topic: [partition]})."""
        low: Offsets = {}
        high: Offsets = {}
        for topic, parts in partitions.items():
            for p in parts:
                lo, hi = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=self._timeout, cached=False
                )
                low.setdefault(topic, {})[str(p)] = max(0, lo)
                high.setdefault(topic, {})[str(p)] = max(0, hi)
        return low, high

    def offsets_for_times(self, wanted: Offsets) -> dict[str, dict[str, int | None]]:
        """For each partition of `wanted` ({topic: {partition: timestamp in ms}}): the first
        offset whose record timestamp is at or after that timestamp, None when no record
        has one (Kafka's ListOffsets by timestamp). KafkaException for a partition the
        broker cannot answer for."""
        tps = [TopicPartition(t, int(p), ts) for t, parts in wanted.items()
               for p, ts in parts.items()]
        out: dict[str, dict[str, int | None]] = {}
        if not tps:
            return out
        for tp in self._consumer.offsets_for_times(tps, timeout=self._timeout):
            if tp.error is not None:
                raise KafkaException(tp.error)
            out.setdefault(tp.topic, {})[str(tp.partition)] = tp.offset if tp.offset >= 0 else None
        return out

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


GAP_CHECK_S = 1.0  # a read making no progress this long checks its records still exist
_NO_SUCH_TOPIC = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)


class PauseGate:
    """Reads a control topic whose records `{..., "paused": bool}` are keyed by a name; the
    last record for our key says whether the stream may advance. Read incrementally.

    Until the topic has been read to its end once, the state is unknown and `refresh`
    answers "paused": a restarted query must not run ahead of a pause it has not seen.
    """

    SYNC_TIMEOUT_S = 10.0

    def __init__(
        self, brokers: str, topic: str, key: str, settings: Mapping[str, str] | None = None
    ) -> None:
        self.topic = topic
        self.key = key.encode()
        self.paused = False
        self._consumer = consumer(brokers, None, settings)
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
    *, fail_on_data_loss: bool = True, include_headers: bool = False,
    settings: Mapping[str, str] | None = None, batch_rows: int = 10_000,
    stall_timeout: float = 60.0, end_grace: float = 10.0,
) -> Iterator[pa.RecordBatch]:
    """Records [begin, until) of one partition as Arrow batches of ARROW_SCHEMA (with
    `include_headers`, ARROW_SCHEMA_WITH_HEADERS).

    Offsets may have holes (compaction, control records): reading stops at the first
    record at or past `until - 1`, or at end of partition once the position reaches
    `until`. Records of the range that no longer exist (removed by retention since the
    batch was planned, topic deleted or recreated) are data loss: DataLossError naming
    them, or with `fail_on_data_loss` false a warning and whatever of the range remains.
    A partition ending before `until` counts as loss only once it has for `end_grace`
    seconds (a new leader may briefly report a lower end). No progress for
    `stall_timeout` seconds is an error (Spark retries the task). `settings`: more
    librdkafka settings for the reading consumer.
    """
    schema = ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA
    reader_key = (brokers, tuple(sorted((settings or {}).items())))
    c = _reader(reader_key)
    try:
        c.assign([TopicPartition(topic, partition, begin)])
        cols: dict[str, list[Any]] = {name: [] for name in schema.names}
        last_progress = check_at = time.monotonic()
        nxt = floor = begin

        def skip(lost: str | None, resume: int | None) -> None:
            """Records at `nxt` vanished: report them, resume where the partition now has
            the rest of the range (or end it)."""
            nonlocal nxt, floor
            if lost is not None:
                report_loss([lost], fail_on_data_loss)
            if resume is None:
                nxt = until
            else:
                c.assign([TopicPartition(topic, partition, resume)])
                nxt = floor = resume

        while nxt < until:
            msgs = c.consume(num_messages=min(batch_rows, until - nxt), timeout=0.05)
            if not msgs:
                now = time.monotonic()
                if now - last_progress > stall_timeout:
                    raise SourceError(f"{topic}[{partition}]: no records at {nxt} (want {until})")
                if now - check_at > GAP_CHECK_S:
                    # librdkafka waits quietly on a deleted partition: ask the broker.
                    check_at = now
                    lost, resume = _gap(c, topic, partition, nxt, until, now - last_progress,
                                        end_grace)
                    if lost is not None:
                        skip(lost, resume)
                continue
            for msg in msgs:
                if msg.topic() is not None and (msg.topic(), msg.partition()) != (topic, partition):
                    continue  # left over from the reader's previous assignment
                err = msg.error()
                if err is not None:
                    code = err.code()
                    if code == KafkaError._PARTITION_EOF:
                        nxt = max(nxt, c.position([TopicPartition(topic, partition)])[0].offset)
                        if nxt >= until:
                            break
                        # at the end before `until`: did the planned records vanish?
                        lost, resume = _gap(c, topic, partition, nxt, until,
                                            time.monotonic() - last_progress, end_grace)
                        if lost is None:
                            continue  # a stale end: the records are on their way
                    elif code in _NO_SUCH_TOPIC and not _deleted(c, topic, partition):
                        raise SourceError(f"{topic}[{partition}]: {err} (the topic still exists)")
                    elif code == KafkaError._AUTO_OFFSET_RESET or code in _NO_SUCH_TOPIC:
                        lost, resume = _gap(c, topic, partition, nxt, until,
                                            time.monotonic() - last_progress, end_grace)
                    else:
                        raise SourceError(f"{topic}[{partition}]: {err}")
                    skip(lost, resume)
                    break
                off = msg.offset()
                assert off is not None
                if off < floor:
                    continue  # fetched before the reader moved on
                if off >= until:
                    nxt = until
                    break
                ts_type, ts = msg.timestamp()
                cols["key"].append(msg.key())
                cols["value"].append(msg.value())
                cols["topic"].append(topic)
                cols["partition"].append(partition)
                cols["offset"].append(off)
                # 0 is the epoch, a timestamp like any other; only none is null
                cols["timestamp"].append(ts * 1000 if ts_type != TIMESTAMP_NOT_AVAILABLE and ts >= 0
                                         else None)
                # Java's TimestampType ids, as Spark shows them: -1 none, 0 CreateTime,
                # 1 LogAppendTime (confluent-kafka counts from 0 for none)
                cols["timestampType"].append(ts_type - 1)
                if include_headers:
                    # a consumed record's headers are a list of (key, value) pairs
                    headers: list[tuple[str, bytes | None]] = msg.headers() or []  # type: ignore[assignment]
                    cols["headers"].append(
                        [{"key": k, "value": v} for k, v in headers] if headers else None
                    )
                nxt = off + 1
                last_progress = check_at = time.monotonic()
            if len(cols["offset"]) >= batch_rows:
                yield pa.RecordBatch.from_pydict(cols, schema=schema)
                cols = {name: [] for name in schema.names}
        if cols["offset"]:
            yield pa.RecordBatch.from_pydict(cols, schema=schema)
    except KafkaException as exc:
        _drop_reader(reader_key)
        raise SourceError(f"{topic}[{partition}]: {exc}") from exc
    except BaseException:
        _drop_reader(reader_key)
        raise


def _gap(
    c: Consumer, topic: str, partition: int, nxt: int, until: int, stuck: float, grace: float
) -> tuple[str | None, int | None]:
    """Reading [nxt, until) hit an offset out of range or the end of the partition, or has
    been `stuck` that many seconds: what was lost (None: nothing, e.g. a stale end) and
    where to resume (None: nowhere)."""
    try:
        lo, hi = c.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=10.0, cached=False
        )
    except KafkaException as exc:
        if exc.args[0].code() not in _NO_SUCH_TOPIC or not _deleted(c, topic, partition):
            raise
        return (f"{topic}[{partition}] is gone (topic deleted): offsets {nxt} to {until - 1} "
                "were not read"), None
    if nxt < lo:
        lost = (f"{topic}[{partition}]: offsets {nxt} to {min(lo, until) - 1} are no longer "
                f"available (the earliest offset is now {lo})")
        return lost, (lo if lo < until else None)
    if hi < until and nxt >= hi and stuck >= grace:
        return (f"{topic}[{partition}]: offsets {nxt} to {until - 1} no longer exist (the "
                f"partition now ends at {hi}: the topic was deleted and recreated, or the "
                "broker lost records)"), None
    return None, nxt


def _deleted(c: Consumer, topic: str, partition: int) -> bool:
    """Whether the broker itself says `topic` (or its `partition`) no longer exists. The
    client's local "unknown topic/partition" is no proof: librdkafka says it too while no
    broker answers (a broker restart), and reading on past records taken for deleted lost
    replicas. Raises SourceError (the read is retried) when no broker answers."""
    try:
        meta = c.list_topics(topic, timeout=10.0).topics.get(topic)
    except KafkaException as exc:
        raise SourceError(f"{topic}[{partition}]: the broker does not answer: {exc}") from exc
    if meta is None:
        return True
    if meta.error is not None:
        if meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return True
        raise SourceError(f"{topic}[{partition}]: {meta.error}")
    return partition not in meta.partitions


# One reading consumer per Python worker, broker list and settings, reused across tasks:
# creating one (connections, metadata) costs far more than reading a small batch. Workers
# run one task at a time, so no locking is needed.
_ReaderKey = tuple[str, tuple[tuple[str, str], ...]]
_READERS: dict[_ReaderKey, Consumer] = {}


def _reader(key: _ReaderKey) -> Consumer:
    if key not in _READERS:
        # Ranges are read only up to offsets known to exist, so the broker never needs to
        # hold a fetch open; and librdkafka keeps one fetch in flight per broker, so a
        # fetch long-polling past the end of the previous range (500 ms by default) would
        # delay the first fetch of the next one by that much.
        # A range start no longer on the broker must be seen, not silently reset (to
        # earliest: records skipped; to latest: the read stalls), hence "error".
        extra: dict[str, Any] = {"fetch.wait.max.ms": 10, "auto.offset.reset": "error"}
        brokers, settings = key
        _READERS[key] = consumer(brokers, None, dict(settings), **extra)
        freeze_heap()  # the worker's modules and this reader live as long as the worker
    return _READERS[key]


def _drop_reader(key: _ReaderKey) -> None:
    c = _READERS.pop(key, None)
    if c is not None:
        c.close()


def close_readers() -> None:
    """Close this process's cached range readers (in a Spark worker they live as long as
    the worker; a driver or test that read ranges itself closes them when done)."""
    for key in list(_READERS):
        _drop_reader(key)
