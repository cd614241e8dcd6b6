"""The crossbeat-kafka sink (`df.write` / `df.writeStream`) against the embedded broker,
read back with confluent-kafka: columns, the topic option over the column, Java's
partitioner for keys, Spark's schema errors, and a Kafka -> Spark -> Kafka query."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.partitioner.default import murmur2

from crossbeat.populator.publisher import ensure_topics
from tests.support.procs import Service, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def fresh_topic(broker: Service, partitions: int = 3) -> str:
    topic = f"sink-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.address, [topic], partitions)
    return topic


def read_all(broker: Service, topic: str, n: int, partitions: int = 3) -> list[Any]:
    """The first `n` records of `topic`, from every partition (offset order within each)."""
    c = Consumer({"bootstrap.servers": broker.address, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Any] = []
    try:
        def more() -> bool:
            for m in c.consume(100, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(m)
            return len(out) >= n
        wait_until(more, timeout=60, what=f"{n} records in {topic}")
    finally:
        c.close()
    return out


def java_partition(key: bytes, partitions: int) -> int:
    """Where Java's default partitioner (and Spark's Kafka sink) puts a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def writer(df: Any, broker: Service, **options: str) -> Any:
    w = df.write.format("crossbeat-kafka").option("kafka.bootstrap.servers", broker.address)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def test_batch_write_columns_partitioner_and_topic_option(spark: Any, broker: Service) -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    topic = fresh_topic(broker)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
        StructField("partition", IntegerType()), StructField("headers", ArrayType(header)),
        StructField("extra", StringType()),
    ])
    rows = [(f"k{i}", b"v%d" % i, None, None, "ignored") for i in range(20)]
    rows += [(None, b"pinned", 2, [("h", b"1"), ("n", None)], None),
             ("tomb", None, 1, None, None)]
    writer(spark.createDataFrame(rows, schema), broker, topic=topic).mode("append").save()
    got = read_all(broker, topic, 22)
    by_value = {m.value(): m for m in got}
    for i in range(20):
        m = by_value[b"v%d" % i]
        assert m.key() == f"k{i}".encode()
        assert m.partition() == java_partition(f"k{i}".encode(), 3)  # Spark's partition
    pinned = by_value[b"pinned"]
    assert (pinned.key(), pinned.partition(), pinned.headers()) == (
        None, 2, [("h", b"1"), ("n", None)])
    tombstone = by_value[None]  # a null value is a tombstone
    assert (tombstone.key(), tombstone.partition()) == (b"tomb", 1)

    # no topic option: each row's topic column; the option, when given, wins over it
    other = fresh_topic(broker, partitions=1)
    df = spark.createDataFrame([(topic, "x"), (other, "y")], "topic string, value string")
    writer(df, broker).mode("overwrite").save()  # Kafka appends: overwrite too
    writer(df, broker, topic=other).mode("append").save()
    with pytest.raises(Exception, match="Append"):  # ErrorIfExists, the default: as Spark's
        writer(df, broker, topic=other).save()
    assert sorted(m.value() for m in read_all(broker, other, 3, partitions=1)) == [b"x", b"y", b"y"]
    assert b"x" in {m.value() for m in read_all(broker, topic, 23)}


@pytest.mark.parametrize(("ddl", "row", "options", "message"), [
    ("key string", ("k",), {"topic": "t"}, "Required attribute 'value' not found"),
    ("value int", (1,), {"topic": "t"}, "value attribute type must be a String or Binary"),
    ("value string, key int", ("v", 1), {"topic": "t"},
     "key attribute type must be a String or Binary"),
    ("value string, partition long", ("v", 0), {"topic": "t"},
     "partition attribute type must be an Int"),
    ("value string", ("v",), {}, "topic option required when no 'topic' attribute is present"),
    ("value string, topic int", ("v", 1), {}, "Topic type must be a String"),
    ("value string", ("v",), {"topic": "t", "kafka.transactional.id": "x"}, "not transactional"),
    ("value string", ("v",), {"topic": "t", "kafka.no.such.setting": "1"}, "librdkafka refuses"),
    ("value string", ("v",), {"topic": "t", "subscribe": "t"}, "subscribe are for reading"),
])
def test_bad_schemas_and_options_fail_before_anything_is_sent(
    spark: Any, broker: Service, ddl: str, row: tuple[Any, ...], options: dict[str, str],
    message: str,
) -> None:
    df = spark.createDataFrame([row], ddl)
    with pytest.raises(Exception, match=message):
        writer(df, broker, **options).mode("append").save()


def test_a_null_topic_fails_the_write(spark: Any, broker: Service) -> None:
    df = spark.createDataFrame([(None, "v")], "topic string, value string")
    with pytest.raises(Exception, match="Null topic present in the data"):
        writer(df, broker).mode("append").save()


def test_streaming_kafka_to_kafka(spark: Any, broker: Service, tmp_path: Path) -> None:
    source, target = fresh_topic(broker), fresh_topic(broker)
    producer = Producer({"bootstrap.servers": broker.address})
    for i in range(50):
        producer.produce(source, key=b"k%d" % (i % 5), value=b"%d" % i)
    assert producer.flush(30) == 0
    query = (
        spark.readStream.format("crossbeat-kafka")
        .option("kafka.bootstrap.servers", broker.address).option("subscribe", source).load()
        .selectExpr("key", "concat(value, '!') AS value")
        .writeStream.format("crossbeat-kafka")
        .option("kafka.bootstrap.servers", broker.address).option("topic", target)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    try:
        query.processAllAvailable()
        got = read_all(broker, target, 50)
        assert sorted(int(m.value()[:-1]) for m in got) == list(range(50))
        assert all(m.value().endswith(b"!") for m in got)
        assert all(m.partition() == java_partition(m.key(), 3) for m in got)
        for i in range(50, 60):
            producer.produce(source, key=b"k%d" % (i % 5), value=b"%d" % i)
        assert producer.flush(30) == 0
        query.processAllAvailable()
        assert sorted(int(m.value()[:-1]) for m in read_all(broker, target, 60)) == list(range(60))
    finally:
        query.stop()


def test_a_record_the_broker_does_not_take_fails_the_write(spark: Any, broker: Service) -> None:
    """At least once: the task waits for every acknowledgement and fails on a refusal."""
    topic = fresh_topic(broker, partitions=1)
    df = spark.createDataFrame([("ok", 0), ("nowhere", 7)], "value string, partition int")
    with pytest.raises(Exception, match="a record could not be written"):
        writer(df, broker, topic=topic).mode("append").save()


@pytest.mark.parametrize("acks", ["1", "0"])
def test_acks_below_all_turn_the_default_idempotence_off(spark: Any, broker: Service, acks: str) -> None:
    """As Java's producer under Spark's sink: `kafka.acks=1` (or 0) without
    `kafka.enable.idempotence` writes, idempotence turned off; the sink's idempotence
    default made librdkafka refuse the pair. Asked for together, they are still refused."""
    from crossbeat.spark.sink import parse_sink_options

    topic = fresh_topic(broker, partitions=1)
    df = spark.createDataFrame([(b"k", b"v")], "key binary, value binary")
    writer(df, broker, topic=topic, **{"kafka.acks": acks}).mode("append").save()
    assert [m.value() for m in read_all(broker, topic, 1, partitions=1)] == [b"v"]
    assert "enable.idempotence" not in parse_sink_options(
        {"kafka.bootstrap.servers": broker.address, "kafka.acks": acks}).config
    with pytest.raises(ValueError, match="librdkafka refuses them"):
        parse_sink_options({"kafka.bootstrap.servers": broker.address, "kafka.acks": acks,
                            "kafka.enable.idempotence": "true"})
