"""`df.write` / `df.writeStream` `.format("crossbeat-kafka")`: rows to Kafka-protocol
topics, as Spark's Kafka sink (`format("kafka")`) writes them.

Options (names case-insensitive; a bad one fails the write, or the query's start, with a
message naming it):
- `kafka.bootstrap.servers` (required);
- `topic`: the topic of every row. Without it each row's `topic` column names its topic
  (a row whose topic is null fails the write); with it, the column is ignored, as Spark
  does;
- other `kafka.*` options are passed to librdkafka's producer (`kafka.acks`,
  `kafka.compression.type`, `kafka.linger.ms`, security settings, ...), which refuses what
  it does not know. The sink's defaults: `enable.idempotence=true` (librdkafka's retries
  never write a record twice; off when `kafka.acks` is 0 or 1 and idempotence was not
  set, as Java's producer turns it off) and `partitioner=murmur2_random`, Java's partitioner, so a
  key lands in the partition Spark's own Kafka sink (and any Java producer) would pick.
  `kafka.transactional.id` is refused: the sink is not transactional.

Columns, as Spark's Kafka sink takes them: `value` (string or binary, required; null
writes a tombstone), `key` (string or binary), `topic` (string), `partition` (int: the
record goes there; null or absent: the partitioner picks), `headers`
(array<struct<key: string, value: binary>>). Other columns are ignored. A column of
another type fails the write before anything is sent ("value attribute type must be a
String or Binary", Spark's messages).

Delivery is at least once, as with Spark's Kafka sink: each task sends its rows and waits
until the broker acknowledged every one (librdkafka's `message.timeout.ms` bounds the
wait); a record that could not be written fails the task, which Spark retries, so a record
may be written twice but none is lost. `commit` (all tasks succeeded) and `abort` have
nothing to do. Streaming queries take append (and, as Spark's Kafka sink, complete and
update) output modes. Batch writes take the `append` and `overwrite` save modes, and both
append, as Spark's Kafka sink (Spark refuses the others for Python data sources, as it does
for Kafka).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from crossbeat.populator.client_settings import RECONNECT
from crossbeat.spark.source_options import KNOWN_OPTIONS

log = logging.getLogger(__name__)

# librdkafka settings the sink decides or refuses, with why
_REFUSED = {
    "transactional.id": "the crossbeat-kafka sink is not transactional (delivery is at least once)",
}
_DEFAULTS = {"enable.idempotence": "true", "partitioner": "murmur2_random",
             **{k: str(v) for k, v in RECONNECT.items()}}
_FLUSH_STEP_S = 1.0


@dataclass(frozen=True)
class SinkOptions:
    """What a writer needs, checked on the driver."""

    config: dict[str, str]  # librdkafka producer settings
    topic: str | None


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task wrote."""

    records: int


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """The sink's options (`ValueError` naming a bad one)."""
    opts = {k.lower(): v for k, v in options.items()}
    brokers = (opts.get("kafka.bootstrap.servers") or "").strip()
    if not brokers:
        raise ValueError("crossbeat-kafka needs option kafka.bootstrap.servers")
    # Spark hands its own writer options over too (checkpointLocation, path...): those are
    # ignored, as Spark's Kafka sink ignores them; the source's are a mistake worth naming
    misplaced = sorted(k for k in opts if k in KNOWN_OPTIONS and k != "kafka.bootstrap.servers")
    if misplaced:
        raise ValueError(f"crossbeat-kafka sink: option(s) {', '.join(misplaced)} are for "
                         "reading (the sink takes kafka.bootstrap.servers, topic, and other "
                         "kafka.* producer settings)")
    config = dict(_DEFAULTS)
    for key, value in opts.items():
        if key.startswith("kafka."):
            name = key.removeprefix("kafka.")
            if name == "bootstrap.servers":
                continue
            if name in _REFUSED:
                raise ValueError(f"Kafka option 'kafka.{name}' is not supported: {_REFUSED[name]}")
            config[name] = value
    config["bootstrap.servers"] = brokers
    acks = str(config.get("acks", config.get("request.required.acks", "all"))).strip().lower()
    if acks not in ("all", "-1") and "kafka.enable.idempotence" not in opts:
        # as Java's producer (which Spark's sink uses): idempotence not asked for is turned
        # off by acks other than all, where librdkafka refused the pair
        config.pop("enable.idempotence")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise ValueError("crossbeat-kafka sink: option topic is empty")
    try:  # librdkafka checks every setting when a client is made; nothing is sent
        Producer(config).flush(0)
    except KafkaException as exc:
        raise ValueError(f"kafka.* options: librdkafka refuses them: {exc.args[0].str()}") from exc
    return SinkOptions(config, topic.strip() if topic else None)


def validate_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's KafkaWriter checks, with its messages (`ValueError`)."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if topic_option is None:
        if "topic" not in fields:
            raise ValueError("topic option required when no 'topic' attribute is present. "
                             "Use the topic option for setting a topic.")
        if not isinstance(fields["topic"], StringType):
            raise ValueError("Topic type must be a String")
    if "value" not in fields:
        raise ValueError("Required attribute 'value' not found")
    if not isinstance(fields["value"], (StringType, BinaryType)):
        raise ValueError("value attribute type must be a String or Binary")
    if "key" in fields and not isinstance(fields["key"], (StringType, BinaryType)):
        raise ValueError("key attribute type must be a String or Binary")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ValueError("partition attribute type must be an Int")
    if "headers" in fields and not _is_headers(fields["headers"]):
        raise ValueError("headers attribute type must be array<struct<key:string,value:binary>>")


def _is_headers(kind: Any) -> bool:
    if not isinstance(kind, ArrayType) or not isinstance(kind.elementType, StructType):
        return False
    parts = {f.name: f.dataType for f in kind.elementType.fields}
    return (set(parts) == {"key", "value"} and isinstance(parts["key"], StringType)
            and isinstance(parts["value"], BinaryType))


class _Delivery:
    """Counts the acknowledgements of one task's records; keeps the first failure."""

    def __init__(self) -> None:
        self.acked = 0
        self.error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, _msg: Any) -> None:
        if err is None:
            self.acked += 1
        elif self.error is None:
            self.error = err


def write_batches(opts: SinkOptions, batches: Iterator[Any]) -> SinkCommit:
    """Send every row of the Arrow record batches; return once all are acknowledged
    (raises RuntimeError naming the first record that could not be written)."""
    producer = Producer(opts.config)
    delivery = _Delivery()
    sent = 0
    for batch in batches:
        names = {name.lower(): i for i, name in enumerate(batch.schema.names)}

        def column(name: str, rows: int, batch: Any = batch, names: dict[str, int] = names) -> list[Any]:
            i = names.get(name)
            return batch.column(i).to_pylist() if i is not None else [None] * rows

        rows = batch.num_rows
        values, keys = column("value", rows), column("key", rows)
        partitions, headers = column("partition", rows), column("headers", rows)
        topics = [opts.topic] * rows if opts.topic is not None else column("topic", rows)
        for i in range(rows):
            topic = topics[i]
            if topic is None:
                raise RuntimeError("Null topic present in the data. Use the topic option for "
                                   "setting a topic.")
            kwargs: dict[str, Any] = {"value": values[i], "key": keys[i], "on_delivery": delivery}
            if partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            _produce(producer, topic, kwargs)
            sent += 1
        producer.poll(0)
        if delivery.error is not None:
            break
    while len(producer) > 0 and delivery.error is None:
        producer.flush(_FLUSH_STEP_S)
    if delivery.error is not None:
        raise RuntimeError(f"crossbeat-kafka sink: a record could not be written: "
                           f"{delivery.error.str()} ({delivery.error.name()}); "
                           f"{delivery.acked} of {sent} acknowledged")
    return SinkCommit(records=sent)


def _produce(producer: Producer, topic: str, kwargs: dict[str, Any]) -> None:
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:  # librdkafka's queue is full: let it drain
            producer.poll(0.1)


class _KafkaSink:
    """What the batch and the streaming writer share: options and schema checked on the
    driver when Spark makes the writer, rows sent by each task."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_sink_options(options)
        validate_schema(schema, self.opts.topic)

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_batches(self.opts, iterator)


class KafkaSinkWriter(_KafkaSink, DataSourceArrowWriter):
    """`df.write.format("crossbeat-kafka")`."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("crossbeat-kafka sink: %d records written", _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("crossbeat-kafka sink: write failed; %d records were written before "
                    "(at least once: a retry may write them again)", _total(messages))


class KafkaSinkStreamWriter(_KafkaSink, DataSourceStreamArrowWriter):
    """`df.writeStream.format("crossbeat-kafka")`."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.debug("crossbeat-kafka sink: batch %d: %d records written", batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("crossbeat-kafka sink: batch %d failed; %d records were written before "
                    "(at least once: its retry may write them again)", batchId, _total(messages))


def _total(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.records for m in messages if isinstance(m, SinkCommit))
