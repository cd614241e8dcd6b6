"""The crossbeat-kafka streaming source against the embedded broker."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from crossbeat.populator.extension import Message
from crossbeat.populator.publisher import Publisher, ensure_topics
from tests.support.procs import Service, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def produce(broker: Service, topic: str, n: int, start: int = 0) -> None:
    Publisher(broker.address).publish(
        Message(topic, f"k{i % 7}".encode(), {"i": i}) for i in range(start, start + n)
    )


class Collector:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.batch_sizes: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [r.asDict() for r in df.collect()]
        with self.lock:
            self.rows.extend(rows)
            self.batch_sizes.append(len(rows))

    def values(self) -> list[int]:
        with self.lock:
            return sorted(orjson.loads(r["value"])["i"] for r in self.rows)


def start_query(spark: Any, broker: Service, topic: str, tmp_path: Path, sink: Collector,
                **options: str) -> Any:
    reader = (
        spark.readStream.format("crossbeat-kafka")
        .option("kafka.bootstrap.servers", broker.address)
        .option("subscribe", topic)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / f"cp-{topic}"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def fresh_topic(broker: Service, partitions: int = 3) -> str:
    topic = f"src-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.address, [topic], partitions)
    return topic


def committed(broker: Service, group: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": broker.address, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return sum(max(0, tp.offset) for tp in tps)
    finally:
        c.close()


def test_bounded_batches_group_commit_and_restart_from_checkpoint(
    spark: Any, broker: Service, tmp_path: Path
) -> None:
    topic = fresh_topic(broker)
    produce(broker, topic, 300)
    sink = Collector()
    group = f"g-{topic}"
    opts = {"maxOffsetsPerTrigger": "100", "kafka.group.id": group}
    q = start_query(spark, broker, topic, tmp_path, sink, **opts)
    try:
        wait_until(lambda: len(sink.values()) >= 300, timeout=120, what="300 rows")
        assert sink.values() == list(range(300))
        assert max(sink.batch_sizes) <= 100 and len(sink.batch_sizes) >= 3
        row = sink.rows[0]
        assert row["topic"] == topic and row["key"].startswith(b"k")
        # commit(end) of batch N runs once batch N+1 is planned: one more record flushes it.
        produce(broker, topic, 1, start=300)
        wait_until(lambda: committed(broker, group, topic, 3) >= 300, timeout=60,
                   what="group offsets committed")
    finally:
        q.stop()
    produce(broker, topic, 49, start=301)
    again = Collector()
    q = start_query(spark, broker, topic, tmp_path, again, **opts)
    try:
        wait_until(lambda: len(set(sink.values()) | set(again.values())) >= 350, timeout=120,
                   what="rows after restart")
        assert sorted(set(sink.values()) | set(again.values())) == list(range(350))
        assert min(again.values()) >= 300 - 100  # at most the last batch replays
    finally:
        q.stop()


def test_json_starting_offsets_and_pause_resume(spark: Any, broker: Service, tmp_path: Path) -> None:
    topic = fresh_topic(broker, partitions=1)
    control = fresh_topic(broker, partitions=1)
    produce(broker, topic, 10)
    pub = Publisher(broker.address)
    pub.publish([Message(control, b"site-x", {"paused": True})])
    sink = Collector()
    q = start_query(spark, broker, topic, tmp_path, sink, pauseTopic=control, pauseKey="site-x",
                    startingOffsets=orjson.dumps({topic: {"0": 7}}).decode())
    try:
        wait_until(lambda: len(q.recentProgress) >= 5, timeout=120, what="paused triggers")
        assert sink.values() == []
        produce(broker, topic, 5, start=10)
        pub.publish([Message(control, b"other", {"paused": False})])
        pub.publish([Message(control, b"site-x", {"paused": False})])
        wait_until(lambda: len(sink.values()) >= 8, timeout=60, what="resumed rows")
        assert sink.values() == list(range(7, 15))
    finally:
        q.stop()


def test_reader_alone_initial_latest_limits_and_ranges(broker: Service) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from crossbeat.spark.kafka_client import close_readers
    from crossbeat.spark.source import KafkaStreamReader

    topic = fresh_topic(broker, partitions=2)
    produce(broker, topic, 20)
    base = {"kafka.bootstrap.servers": broker.address, "subscribe": topic}
    earliest = KafkaStreamReader(base)
    latest_reader = KafkaStreamReader({**base, "startingOffsets": "latest"})
    try:
        start = earliest.initialOffset()
        assert start == {topic: {"0": 0, "1": 0}}
        latest = latest_reader.initialOffset()
        assert sum(latest[topic].values()) == 20
        limited = earliest.latestOffset(start, ReadMaxRows(6))
        assert sum(limited[topic].values()) <= 6
        assert all(v > 0 for v in limited[topic].values())  # both partitions progress
        assert earliest.latestOffset(start, ReadAllAvailable()) == latest
        parts = earliest.partitions(start, latest)
        rows = [
            orjson.loads(v)["i"]
            for p in parts
            for batch in earliest.read(p)
            for v in batch.column("value").to_pylist()
        ]
        assert sorted(rows) == list(range(20))
        assert earliest.partitions(latest, latest) == []
        with pytest.raises(ValueError, match="subscribe"):
            KafkaStreamReader({"kafka.bootstrap.servers": broker.address})
        with pytest.raises(ValueError, match="startingOffsets"):
            KafkaStreamReader({**base, "startingOffsets": "{bad"})
    finally:
        # close what librdkafka keeps open before the broker stops (otherwise its threads
        # log "Connection refused" until the test process exits)
        earliest.stop()
        latest_reader.stop()
        close_readers()
