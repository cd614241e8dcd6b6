"""`format("crossbeat-kafka")`: a PySpark source over Kafka-protocol topics, streaming
(`spark.readStream`) and batch (`spark.read`), behaving as Spark's built-in Kafka source
(`format("kafka")`) for the options below. Writing to the format (`df.write`,
`df.writeStream`) is the sink of `crossbeat.spark.sink`.

Works the same against the embedded broker and any Apache Kafka cluster: it only uses
librdkafka (confluent-kafka). Options (names case-insensitive; an unknown option or an
invalid value fails `load()` with a message naming it, an option the kind of query does
not take fails its start):
- `kafka.bootstrap.servers` (required);
- exactly one of `subscribe` (comma-separated topics), `subscribePattern` (a regular
  expression the whole topic name must match, as Java's; topics created later that match
  are read from their earliest offset; internal topics never match) or `assign` (JSON
  `{"topic": [0, 1]}`: exactly these partitions);
- `startingOffsets`: `earliest` (default), `latest` (streaming only), or JSON
  `{"topic": {"0": 42}}` where -2 means earliest and -1 latest (streaming only); a
  partition the JSON does not name starts at its earliest offset, one it names must
  exist. An offset past the partition's latest one is an error in a batch read (Spark's
  "Beginning offset … is after the ending offset"); streaming, it is data loss under
  `failOnDataLoss` (false: the partition starts at its latest offset, as Spark's does).
  Streaming: used only when the query has no checkpoint yet;
- `startingTimestamp` (a timestamp in ms since the epoch, for every partition) or
  `startingOffsetsByTimestamp` (JSON `{"topic": {"0": 1700000000000}}`; a partition it
  does not name starts at its earliest offset, one it names must exist): start each
  partition at its first offset whose record timestamp is at or after the timestamp
  (Kafka's ListOffsets by timestamp). Spark's precedence: `startingTimestamp`, then
  `startingOffsetsByTimestamp`, then `startingOffsets` (the others are then ignored, not
  even checked). Streaming: used only when the query has no checkpoint yet;
- `startingOffsetsByTimestampStrategy`: when a partition has no record at or after its
  starting timestamp (an empty partition included), `error` (default) fails the query
  ("No offset matched from request of topic-partition …"); `latest` starts that partition
  at its latest offset;
- `endingOffsets` (batch only): `latest` (default) or JSON as above (-1 latest; a
  partition not named ends at its latest offset, one named must exist; an offset past
  the latest one reads to the latest one);
- `endingTimestamp` / `endingOffsetsByTimestamp` (batch only, same forms and precedence
  over `endingOffsets` as the starting ones): end each partition before its first record
  whose timestamp is at or after the timestamp; a partition with none, or not named,
  ends at its latest offset;
- `failOnDataLoss` (default `true`): records the query should read but that no longer
  exist — below a partition's earliest offset (retention, a truncated or recreated topic),
  past its end (a topic recreated smaller), a partition that disappeared, or a partition
  discovered late whose first records are gone — fail the query with a `DataLossError`
  naming topic, partition and the offsets lost. `false`: log a warning and continue from
  the earliest offset available;
- `includeHeaders` (default `false`): add the `headers` column;
- `kafka.isolation.level`: `read_uncommitted` (default, as Spark's, whose Java consumer
  defaults to it: records of aborted and open transactions are read, and nothing waits for
  an open transaction) or `read_committed`;
- `maxOffsetsPerTrigger` (streaming): at most this many records per micro-batch, shared
  between partitions in proportion to their backlog;
- `minOffsetsPerTrigger` (streaming): a trigger plans no micro-batch (latestOffset
  returns its start) while fewer than this many new records are available, unless
  `maxTriggerDelay` (default `15m`; `30s`, `500ms`, … as Spark writes durations) has
  passed since the last micro-batch was let through; the query's first trigger never
  waits. Not above `maxOffsetsPerTrigger`, which still caps a batch that runs. A trigger
  Spark plans with ReadAllAvailable (Trigger.Once) reads everything available;
  Trigger.AvailableNow reads up to the offsets of its start in batches of at most
  `maxOffsetsPerTrigger`, none held back by `minOffsetsPerTrigger`, then stops;
- `rowsPerTask` (default 20000): a micro-batch's partition ranges are packed into Spark
  tasks of about this many records (a partition's range is never split), so a small
  batch is one task;
- `kafka.group.id` (streaming): processed offsets are committed to this consumer group
  after each batch (lag visible with kafka-consumer-groups, kcat, …); the Spark
  checkpoint stays the source of truth, so the group trails by up to one batch;
- `pauseTopic` + `pauseKey` (streaming): while the last record for `pauseKey` in that
  topic says `{"paused": true}`, the stream makes no progress (nothing is skipped);
- other `kafka.*` options are passed to librdkafka (e.g. `kafka.security.protocol`,
  `kafka.sasl.mechanism`, `kafka.ssl.ca.location`, `kafka.client.id`), which refuses at
  `load()` what it does not know, including Java-only settings (`sasl.jaas.config`,
  trust stores); those the source sets itself (`auto.offset.reset`,
  `enable.auto.commit`, the deserializers, …) are refused as Spark refuses them.
Spark's other Kafka options (`minPartitions`, `maxRecordsPerPartition`, `groupIdPrefix`,
…) are not supported and refused. `endingTimestamp`, which Spark's streaming queries
ignore, is refused by them as the other ending options are; `minOffsetsPerTrigger`,
`maxOffsetsPerTrigger` and `maxTriggerDelay` are checked, then ignored, by batch queries.

Rows, as Spark's Kafka source: key binary, value binary, topic string, partition int,
offset long, timestamp timestamp, timestampType int (0 CreateTime, 1 LogAppendTime, -1
none); with `includeHeaders`, headers array<struct<key: string, value: binary>> (null for
a record without headers).

Per the PySpark model, `initialOffset`/`latestOffset`/`partitions`/`commit` run on a
long-lived driver object (holding the clients below), while each `read()` runs on an
executor from a pickled copy and opens its own consumer. Data loss is checked both when
a micro-batch is planned and when its records are read (retention may remove them in
between; a partition found ending before a planned range counts as loss at read time
only after 10 s, as a new leader may briefly report a lower end).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaException
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from crossbeat.spark import kafka_client
from crossbeat.spark.offsets import (
    Offsets,
    limit_offsets,
    merge_new_partitions,
    normalise,
    ranges,
    reconcile,
    resolve,
)
from crossbeat.spark.source_options import SourceOptions, Timestamps, parse_options

log = logging.getLogger(__name__)
PAUSE_REFRESH_S = 1.0


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


def read_ranges(opts: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    """The records of one task (executor side, stream and batch alike)."""
    if not isinstance(partition, KafkaRange):
        # PySpark plans a batch read with no partitions as one InputPartition(None): there
        # is nothing to read (an empty or missing topic, starting offsets at the latest)
        return
    for topic, part, begin, until in partition.ranges:
        yield from kafka_client.read_range(
            opts.brokers, topic, part, begin, until,
            fail_on_data_loss=opts.fail_on_data_loss, include_headers=opts.include_headers,
            settings=opts.settings,
        )


def require_existing(named: Offsets, high: Offsets, option: str) -> None:
    """ValueError for a partition option `option` names (topic -> partitions) that does not
    exist (Spark's "you must specify all TopicPartitions" check, for the partitions named)."""
    for topic, parts in named.items():
        for p in parts:
            if p not in high.get(topic, {}):
                raise ValueError(f"option {option} names {topic}[{p}], which does not exist")


def named_offsets(doc: Offsets, low: Offsets, high: Offsets, option: str) -> Offsets:
    """The offsets an offsets JSON (`option`: startingOffsets, endingOffsets) names, its
    sentinels resolved; ValueError for a partition it names that does not exist."""
    require_existing(doc, high, option)
    return resolve(doc, low, high)


def past_the_end(start: Offsets, high: Offsets) -> list[tuple[str, str, int, int]]:
    """(topic, partition, offset, latest offset) of each starting offset past its
    partition's latest offset."""
    return [(t, p, off, high[t][p]) for t, parts in start.items() for p, off in parts.items()
            if p in high.get(t, {}) and off > high[t][p]]


def timestamp_offsets(
    wm: kafka_client.Watermarks, spec: Timestamps, high: Offsets, *, no_match: str | None
) -> Offsets:
    """The offsets `spec` picks in the partitions of `high` (those it names, or all with one
    timestamp for every partition): for each, the first offset whose record timestamp is at
    or after the given one. A partition with no such record: its latest offset (ending
    bounds, `no_match` None or "latest"), or ValueError (`no_match` "error"). ValueError
    too for a partition `spec` names that does not exist."""
    require_existing(spec.partitions, high, spec.option)
    wanted: Offsets = {}
    for topic, parts in high.items():
        for p in parts:
            ts = spec.of(topic, p)
            if ts is not None:
                wanted.setdefault(topic, {})[p] = ts
    found = wm.offsets_for_times(wanted)
    out: Offsets = {}
    for topic, parts in wanted.items():
        for p, ts in parts.items():
            offset = found.get(topic, {}).get(p)
            if offset is None:
                if no_match == "error":
                    # Spark's message, then how to get past it
                    raise ValueError(
                        f"No offset matched from request of topic-partition {topic}-{p} and "
                        f"timestamp {ts}: no record of {topic}[{p}] has a timestamp at or "
                        f"after it ({spec.option}; set startingOffsetsByTimestampStrategy to "
                        "latest to start such partitions at their latest offset)")
                offset = high[topic][p]
            out.setdefault(topic, {})[p] = offset
    return out


class CrossbeatKafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "crossbeat-kafka"

    def schema(self) -> str:
        # Spark asks for the schema in load(): options are checked there, before any query.
        opts = parse_options(self.options)
        if opts.include_headers:
            return kafka_client.SPARK_SCHEMA_WITH_HEADERS
        return kafka_client.SPARK_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))

    def reader(self, schema: Any) -> DataSourceReader:
        return KafkaBatchReader(dict(self.options))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        # Kafka cannot overwrite: every save mode appends, as with Spark's Kafka sink
        from crossbeat.spark.sink import KafkaSinkWriter

        return KafkaSinkWriter(dict(self.options), schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        from crossbeat.spark.sink import KafkaSinkStreamWriter

        return KafkaSinkStreamWriter(dict(self.options), schema)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream`. `clock`: wall-clock seconds as time.time gives them, for
    maxTriggerDelay (a test passes its own).

    Trigger.AvailableNow: the query reads up to the latest offsets of its partitions as
    they are when it starts (records written later, and partitions that appear later, wait
    for the next run), in micro-batches of at most maxOffsetsPerTrigger, then stops.
    minOffsetsPerTrigger holds none of them back, as Spark's Kafka source: the last
    records would otherwise never be read. A paused stream (pauseTopic) has nothing
    available: the run ends."""

    def __init__(
        self, options: Mapping[str, str], clock: Callable[[], float] = time.time
    ) -> None:
        self.opts = parse_options(options, streaming=True)
        self._clock = clock
        # When the last batch was let through by minOffsetsPerTrigger/maxTriggerDelay;
        # 0 as in Spark: the query's first trigger never waits.
        self._last_trigger_ms = 0.0
        self.sub = self.opts.subscription
        self._watermarks: kafka_client.Watermarks | None = None
        self._gate: kafka_client.PauseGate | None = None
        self._gate_checked = 0.0
        self._gate_closed = True
        # (start, end, where reading starts) of the batch latestOffset planned last
        self._plan: tuple[Offsets, Offsets, Offsets] | None = None
        # Trigger.AvailableNow: the latest offsets when the query started, read no further
        self._available_now: Offsets | None = None

    # Clients are driver-only and not picklable: the copies sent to executors drop them.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_watermarks"] = None
        state["_gate"] = None
        return state

    def _wm(self) -> kafka_client.Watermarks:
        if self._watermarks is None:
            self._watermarks = kafka_client.Watermarks(
                self.opts.brokers, self.opts.group, self.opts.settings
            )
        return self._watermarks

    def _offsets(self) -> tuple[Offsets, Offsets]:
        wm = self._wm()
        return wm.offsets(self.sub.partitions(wm))

    def _paused(self) -> bool:
        if self.opts.pause_topic is None:
            return False
        if self._gate is None:
            self._gate = kafka_client.PauseGate(
                self.opts.brokers, self.opts.pause_topic, self.opts.pause_key, self.opts.settings
            )
        now = time.monotonic()
        if now - self._gate_checked >= PAUSE_REFRESH_S:
            self._gate_closed = self._gate.refresh(timeout=0.5)
            self._gate_checked = now
        return self._gate_closed

    def prepareForTriggerAvailableNow(self) -> None:
        _low, high = self._offsets()
        self._available_now = high

    def initialOffset(self) -> dict[str, Any]:
        low, high = self._offsets()
        if self.opts.starting == "earliest":
            return low
        if self.opts.starting == "latest":
            return high
        if isinstance(self.opts.starting, Timestamps):
            found = timestamp_offsets(self._wm(), self.opts.starting, high,
                                      no_match=self.opts.no_match)
            return merge_new_partitions(found, high, low)
        assert isinstance(self.opts.starting, dict)
        # A named offset no longer available is reported by the first latestOffset. One past
        # the end was never there: data loss, or (failOnDataLoss=false) start at the latest
        # offset, as Spark's source does; not the earliest, where a checkpoint's offset past
        # the end (a topic recreated smaller) resumes
        named = named_offsets(self.opts.starting, low, high, "startingOffsets")
        ahead = past_the_end(named, high)
        kafka_client.report_loss(
            [f"{t}[{p}]: startingOffsets {off} is past the end of the partition ({hi}): it "
             f"starts at its latest offset" for t, p, off, hi in ahead], self.opts.fail_on_data_loss)
        for t, p, _, hi in ahead:
            named[t][p] = hi
        return merge_new_partitions(named, high, low)

    def getDefaultReadLimit(self) -> ReadLimit:
        # PySpark has no composite limit: ReadMinRows stands for minOffsetsPerTrigger with
        # maxTriggerDelay and maxOffsetsPerTrigger (from the options). Spark hands the
        # default back to latestOffset, or ReadAllAvailable where a trigger must read
        # everything (Trigger.Once).
        if self.opts.min_rows:
            return ReadMinRows(self.opts.min_rows)
        return ReadMaxRows(self.opts.max_rows) if self.opts.max_rows else ReadAllAvailable()

    def _delay_batch(self, min_rows: int, begin: Offsets, high: Offsets) -> bool:
        """Whether to skip this trigger (Spark's KafkaMicroBatchStream.delayBatch): fewer
        than `min_rows` new records and less than maxTriggerDelay since the last batch
        that was let through."""
        now = self._clock() * 1000
        if now - self._last_trigger_ms >= self.opts.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        new = sum(max(0, o - begin.get(t, {}).get(p, 0))
                  for t, parts in high.items() for p, o in parts.items())
        if new < min_rows:
            return True
        self._last_trigger_ms = now
        return False

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        previous = normalise(start)
        try:
            if self._paused():
                return previous
            low, high = self._offsets()
        except KafkaException as exc:
            # Broker unreachable: plan no new data this trigger rather than fail the query.
            log.warning("cannot read offsets of %s: %s", self.sub, exc)
            return previous
        if self._available_now is not None:
            high = _capped(high, self._available_now)
        begin, lost = reconcile(self.sub.restrict(previous), low, high, report_new=True)
        kafka_client.report_loss(lost, self.opts.fail_on_data_loss)
        if isinstance(limit, ReadMinRows) and self._available_now is not None:
            max_rows = self.opts.max_rows  # AvailableNow: no batch waits for more records
        elif isinstance(limit, ReadMinRows):
            if self._delay_batch(limit.min_rows, begin, high):
                return previous  # no batch this trigger
            max_rows = self.opts.max_rows
        else:
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = limit_offsets(begin, high, max_rows)
        self._plan = (previous, end, begin)
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        s, e = normalise(start), normalise(end)
        if self._plan is not None and self._plan[:2] == (s, e):
            begin = self._plan[2]  # moved past lost records by latestOffset
        elif any(o < s.get(t, {}).get(p, 0) for t, parts in e.items() for p, o in parts.items()):
            # Offsets went back (planned with failOnDataLoss=false before a restart): from
            # where the partition starts now. Records below it are the reader's to report.
            low, high = self._offsets()
            begin, lost = reconcile(self.sub.restrict(s), low, high, report_new=False)
            kafka_client.report_loss(lost, self.opts.fail_on_data_loss)
        else:
            begin = s
        return pack(ranges(begin, e), self.opts.rows_per_task)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_ranges(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        if self.opts.group is None:
            return
        try:
            self._wm().commit(normalise(end))
        except Exception as exc:  # noqa: BLE001 - lag reporting must not stop the query
            log.warning("committing offsets to group %s failed: %s", self.opts.group, exc)

    def stop(self) -> None:
        for client in (self._watermarks, self._gate):
            if client is not None:
                client.close()
        self._watermarks = self._gate = None


def _capped(high: Offsets, target: Offsets) -> Offsets:
    """`high` no further than `target`, and only for its partitions (AvailableNow)."""
    return {
        topic: {p: min(o, high[topic][p]) for p, o in parts.items() if p in high.get(topic, {})}
        for topic, parts in target.items() if topic in high
    }


class KafkaBatchReader(DataSourceReader):
    """`spark.read`: the records between startingOffsets and endingOffsets, as they are
    when the query is planned."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = parse_options(options, streaming=False)

    def partitions(self) -> Sequence[InputPartition]:
        wm = kafka_client.Watermarks(self.opts.brokers, None, self.opts.settings)
        try:
            low, high = wm.offsets(self.opts.subscription.partitions(wm))
            start = low
            if isinstance(self.opts.starting, dict):
                named = named_offsets(self.opts.starting, low, high, "startingOffsets")
                for t, p, off, hi in past_the_end(named, high):
                    # Spark's message (KafkaSourceRDD), whatever failOnDataLoss says
                    raise ValueError(
                        f"Beginning offset {off} is after the ending offset {hi} for topic {t} "
                        f"partition {p}. You either provided an invalid fromOffset, or the Kafka "
                        "topic has been damaged")
                start = merge_new_partitions(named, high, low)
            elif isinstance(self.opts.starting, Timestamps):
                start = merge_new_partitions(
                    timestamp_offsets(wm, self.opts.starting, high, no_match=self.opts.no_match),
                    high, low)
            ending: Offsets = {}
            if isinstance(self.opts.ending, Timestamps):
                # no record at or after the timestamp: read to the latest offset (Spark)
                ending = timestamp_offsets(wm, self.opts.ending, high, no_match=None)
        finally:
            wm.close()
        begin, lost = reconcile(start, low, high, report_new=False)
        kafka_client.report_loss(lost, self.opts.fail_on_data_loss)
        end = high
        if isinstance(self.opts.ending, Timestamps):
            end = {t: {p: ending.get(t, {}).get(p, hi) for p, hi in parts.items()}
                   for t, parts in high.items()}
        elif isinstance(self.opts.ending, dict):
            named = named_offsets(self.opts.ending, low, high, "endingOffsets")
            end = {
                t: {p: min(hi, named.get(t, {}).get(p, hi)) for p, hi in parts.items()}
                for t, parts in high.items()
            }
        for topic, parts in end.items():
            for p, until in parts.items():
                if until < begin[topic][p]:
                    option = (self.opts.ending.option
                              if isinstance(self.opts.ending, Timestamps) else "endingOffsets")
                    raise ValueError(f"{topic}[{p}]: the ending offset {until} ({option}) is "
                                     f"before the starting offset {begin[topic][p]}")
        return pack(ranges(begin, end), self.opts.rows_per_task)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_ranges(self.opts, partition)


def register(spark: Any) -> None:
    """Make `format("crossbeat-kafka")` available in `spark`."""
    spark.dataSource.register(CrossbeatKafkaDataSource)
