"""The crossbeat-kafka streaming source against the embedded broker."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from crossbeat.populator.extension import Message
from crossbeat.populator.publisher import Publisher, ensure_topics
from tests.support.procs import Service, start_service, wait_until

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
                name: str = "", **options: str) -> Any:
    reader = spark.readStream.format("crossbeat-kafka").option(
        "kafka.bootstrap.servers", broker.address
    )
    if "subscribePattern" not in options:
        reader = reader.option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / f"cp-{topic}{name}"))
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


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A broker applying retention every 100 ms (the session broker: every 5 minutes)."""
    service = start_service(
        ["broker", "--data-dir", str(tmp_path_factory.mktemp("retention-broker")),
         "--listen", "127.0.0.1:0"],
        env={"CROSSBEAT_BROKER_RETENTION_CHECK_INTERVAL_MS": "100"},
    )
    yield service
    service.stop()


def create_topic(broker: Service, partitions: int = 1, **config: str) -> str:
    topic = f"src-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic(topic, partitions, -1, config=config)])[topic].result(30)
    return topic


def watermarks(broker: Service, topic: str, partition: int = 0) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": broker.address, "group.id": "watermarks"})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, partition), 10, cached=False)
        return lo, hi
    finally:
        c.close()


def truncated_topic(broker: Service) -> str:
    """A one-partition topic whose offsets 0-9 retention removed; 10-14 remain."""
    topic = create_topic(broker, **{"retention.ms": "3600000"})
    producer = Producer({"bootstrap.servers": broker.address})
    two_hours_ago = int(time.time() * 1000) - 2 * 3600 * 1000
    for i in range(10):
        producer.produce(topic, orjson.dumps({"i": i}), timestamp=two_hours_ago)
    producer.flush(30)
    wait_until(lambda: watermarks(broker, topic) == (10, 10), timeout=30, what="retention")
    for i in range(10, 15):
        producer.produce(topic, orjson.dumps({"i": i}))
    producer.flush(30)
    assert watermarks(broker, topic) == (10, 15)
    return topic


def test_reader_data_loss_truncated_deleted_and_recreated_topics(retention_broker: Service) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from crossbeat.spark.kafka_client import DataLossError, close_readers, read_range
    from crossbeat.spark.source import KafkaStreamReader

    broker = retention_broker
    topic = truncated_topic(broker)
    base = {"kafka.bootstrap.servers": broker.address, "subscribe": topic,
            "startingOffsets": orjson.dumps({topic: {"0": 0}}).decode(),
            "kafka.client.id": "crossbeat-test"}  # handed to every consumer the source makes
    strict = KafkaStreamReader(base)
    lenient = KafkaStreamReader({**base, "failOnDataLoss": "false"})

    def values(reader: Any, start: Any, end: Any) -> list[int]:
        return [orjson.loads(v)["i"] for part in reader.partitions(start, end)
                for batch in reader.read(part) for v in batch.column("value").to_pylist()]

    try:
        # planning: the query's next offset 0 is below the earliest offset, 10
        start = strict.initialOffset()
        assert start == {topic: {"0": 0}}
        with pytest.raises(DataLossError, match=rf"{topic}\[0\]: offsets 0 to 9 are no longer "
                           "available .*failOnDataLoss.* to \"false\""):
            strict.latestOffset(start, ReadAllAvailable())
        end = lenient.latestOffset(start, ReadAllAvailable())
        assert end == {topic: {"0": 15}}
        assert values(lenient, start, end) == list(range(10, 15))
        # reading: records removed after the batch was planned
        with pytest.raises(DataLossError, match=rf"{topic}\[0\]: offsets 3 to 9 are no longer"):
            list(read_range(broker.address, topic, 0, 3, 12))
        rows = read_range(broker.address, topic, 0, 3, 12, fail_on_data_loss=False)
        assert [o for b in rows for o in b.column("offset").to_pylist()] == [10, 11]

        # the topic is deleted: its partition is gone
        admin = AdminClient({"bootstrap.servers": broker.address})
        admin.delete_topics([topic])[topic].result(30)
        wait_until(lambda: not admin.list_topics(timeout=10).topics.get(topic), timeout=30,
                   what="topic deleted")
        with pytest.raises(DataLossError, match=rf"{topic}\[0\] is gone .* from offset 15"):
            strict.latestOffset(end, ReadAllAvailable())
        assert lenient.latestOffset(end, ReadAllAvailable()) == {}
        with pytest.raises(DataLossError, match=rf"{topic}\[0\] is gone"):
            list(read_range(broker.address, topic, 0, 12, 15))

        # ... and recreated with fewer records than the query had read: offsets went back
        admin.create_topics([NewTopic(topic, 1, -1)])[topic].result(30)
        Publisher(broker.address).publish(Message(topic, b"k", {"i": i}) for i in range(3))
        with pytest.raises(DataLossError, match=rf"{topic}\[0\]: offset 15 is past the end "
                           r"of the partition \(3\)"):
            strict.latestOffset(end, ReadAllAvailable())
        again = lenient.latestOffset(end, ReadAllAvailable())
        assert again == {topic: {"0": 3}}
        assert values(lenient, end, again) == [0, 1, 2]
        with pytest.raises(DataLossError, match=rf"{topic}\[0\]: offsets 3 to 14 no longer exist"):
            list(read_range(broker.address, topic, 0, 0, 15, end_grace=0.5))
    finally:
        strict.stop()
        lenient.stop()
        close_readers()


def test_query_fails_on_data_loss_or_continues_from_earliest(
    spark: Any, retention_broker: Service, tmp_path: Path
) -> None:
    topic = truncated_topic(retention_broker)
    start = orjson.dumps({topic: {"0": 0}}).decode()
    failing, lenient = Collector(), Collector()
    q_fail = start_query(spark, retention_broker, topic, tmp_path, failing, name="-fail",
                         startingOffsets=start)
    q_skip = start_query(spark, retention_broker, topic, tmp_path, lenient, name="-skip",
                         startingOffsets=start, failOnDataLoss="false")
    try:
        wait_until(lambda: len(lenient.values()) >= 5, timeout=120, what="rows after the loss")
        assert lenient.values() == list(range(10, 15))
        wait_until(lambda: not q_fail.isActive, timeout=60, what="query failed")
        error = str(q_fail.exception())
        assert f"{topic}[0]: offsets 0 to 9 are no longer available" in error
        assert "failOnDataLoss" in error and failing.rows == []
    finally:
        q_fail.stop()
        q_skip.stop()


def test_pattern_headers_timestamp_type_and_batch_reads(
    spark: Any, broker: Service, tmp_path: Path
) -> None:
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.address})
    first, outsider, later = f"{prefix}-a", f"x{prefix}-a", f"{prefix}-b"
    for name, parts in ((first, 2), (outsider, 1)):
        admin.create_topics([NewTopic(name, parts, -1)])[name].result(30)
    producer = Producer({"bootstrap.servers": broker.address})
    for i in range(4):
        producer.produce(first, orjson.dumps({"i": i}), partition=i % 2,
                         headers=[("h", b"v%d" % i), ("none", None)])
    producer.produce(outsider, orjson.dumps({"i": 99}))  # the pattern must match whole names
    producer.flush(30)
    sink = Collector()
    q = start_query(spark, broker, prefix, tmp_path, sink,
                    subscribePattern=f"{prefix}-.*", includeHeaders="true")
    try:
        wait_until(lambda: len(sink.values()) >= 4, timeout=120, what="rows of the first topic")
        # a matching topic created while the query runs is read from its start
        admin.create_topics([NewTopic(later, 1, -1, config={
            "message.timestamp.type": "LogAppendTime"})])[later].result(30)
        producer.produce(later, orjson.dumps({"i": 4}))
        producer.flush(30)
        wait_until(lambda: len(sink.values()) >= 5, timeout=60, what="rows of the new topic")
        assert sink.values() == list(range(5))
    finally:
        q.stop()
    rows = {orjson.loads(r["value"])["i"]: r for r in sink.rows}
    assert list(rows[0]) == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType", "headers"]
    assert (rows[2]["topic"], rows[2]["partition"], rows[2]["timestampType"]) == (first, 0, 0)
    assert [h.asDict() for h in rows[2]["headers"]] == [{"key": "h", "value": b"v2"},
                                                        {"key": "none", "value": None}]
    assert (rows[4]["topic"], rows[4]["timestampType"], rows[4]["headers"]) == (later, 1, None)

    def batch(**options: str) -> Any:
        reader = spark.read.format("crossbeat-kafka").option("kafka.bootstrap.servers",
                                                             broker.address)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    whole = batch(subscribePattern=f"{prefix}-.*")  # earliest to latest by default
    assert whole.columns == list(rows[0])[:-1]
    assert sorted(orjson.loads(r.value)["i"] for r in whole.collect()) == list(range(5))
    part = batch(assign=orjson.dumps({first: [1]}).decode(),
                 startingOffsets=orjson.dumps({first: {"1": 1}}).decode(),
                 endingOffsets=orjson.dumps({first: {"1": -1}}).decode())
    assert [(r.partition, r.offset, orjson.loads(r.value)["i"]) for r in part.collect()] == [
        (1, 1, 3)
    ]
    with pytest.raises(Exception, match="failOnDataLoss must be true or false"):
        batch(subscribe=first, failOnDataLoss="maybe")
    with pytest.raises(Exception, match="Only one of the following options can be specified"):
        spark.readStream.format("crossbeat-kafka").option(
            "kafka.bootstrap.servers", broker.address
        ).option("subscribe", first).option("assign", "{}").load()


def stamped_topic(broker: Service) -> tuple[str, int]:
    """A two-partition topic whose records carry explicit timestamps (ms): partition 0
    base+1000, +2000, +3000 at offsets 0-2; partition 1 base+1500, +2500 at offsets 0-1.
    `base` is a minute ago, well inside retention."""
    topic = fresh_topic(broker, partitions=2)
    base = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": broker.address})
    for partition, stamps in ((0, (1000, 2000, 3000)), (1, (1500, 2500))):
        for i, ts in enumerate(stamps):
            producer.produce(topic, orjson.dumps({"i": i}), partition=partition,
                             timestamp=base + ts)
    producer.flush(30)
    return topic, base


def test_reader_timestamps_choose_offsets_per_partition_and_strategies(broker: Service) -> None:
    from crossbeat.spark.kafka_client import close_readers
    from crossbeat.spark.source import KafkaBatchReader, KafkaStreamReader

    topic, base = stamped_topic(broker)
    opts = {"kafka.bootstrap.servers": broker.address, "subscribe": topic}

    def initial(**options: str) -> Any:
        reader = KafkaStreamReader({**opts, **options})
        try:
            return reader.initialOffset()
        finally:
            reader.stop()

    def batch_ranges(**options: str) -> list[tuple[str, int, int, int]]:
        return [r for task in KafkaBatchReader({**opts, **options}).partitions()
                for r in task.ranges]  # type: ignore[attr-defined]

    try:
        # the first offset at or after the timestamp; an unnamed partition from earliest
        by_partition = orjson.dumps({topic: {"0": base + 1500}}).decode()
        assert initial(startingOffsetsByTimestamp=by_partition) == {topic: {"0": 1, "1": 0}}
        assert initial(startingTimestamp=str(base + 2000),
                       startingOffsets="latest") == {topic: {"0": 1, "1": 1}}
        # partition 1 has nothing at or after +2600: fail (default), or start at its latest
        with pytest.raises(ValueError, match=f"No offset matched from request of "
                           f"topic-partition {topic}-1 and timestamp {base + 2600}"):
            initial(startingTimestamp=str(base + 2600))
        assert initial(startingTimestamp=str(base + 2600),
                       startingOffsetsByTimestampStrategy="latest") == {topic: {"0": 2, "1": 2}}
        with pytest.raises(ValueError, match=rf"names {topic}\[5\], which does not exist"):
            initial(startingOffsetsByTimestamp=orjson.dumps({topic: {"5": base}}).decode())

        # batch: end before the first record at or after the ending timestamp; a partition
        # with none (or not named) reads to its latest offset
        assert batch_ranges(startingOffsetsByTimestamp=by_partition,
                            endingTimestamp=str(base + 2500)) == [(topic, 0, 1, 2),
                                                                  (topic, 1, 0, 1)]
        assert batch_ranges(startingTimestamp=str(base + 1200),
                            endingOffsetsByTimestamp=orjson.dumps(
                                {topic: {"1": base + 9999}}).decode()) == [(topic, 0, 1, 3),
                                                                           (topic, 1, 0, 2)]
        with pytest.raises(ValueError, match=rf"{topic}\[0\]: the ending offset 0 \(endingTimestamp\) "
                           "is before the starting offset 1"):
            batch_ranges(startingTimestamp=str(base + 2000), endingTimestamp=str(base + 1000))
        reader = KafkaBatchReader({**opts, "startingTimestamp": str(base + 2500)})
        rows = [(b["partition"], b["offset"]) for task in reader.partitions()
                for batch in reader.read(task) for b in batch.to_pylist()]
        assert sorted(rows) == [(0, 2), (1, 1)]
    finally:
        close_readers()


def test_reader_min_offsets_per_trigger_waits_up_to_max_trigger_delay(broker: Service) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    from crossbeat.spark.source import KafkaStreamReader

    topic = fresh_topic(broker, partitions=2)
    produce(broker, topic, 3)
    now = [1_000.0]  # seconds, as time.time
    opts = {"kafka.bootstrap.servers": broker.address, "subscribe": topic,
            "minOffsetsPerTrigger": "5", "maxTriggerDelay": "10s"}
    reader = KafkaStreamReader(opts, clock=lambda: now[0])
    capped = KafkaStreamReader({**opts, "minOffsetsPerTrigger": "2",
                                "maxOffsetsPerTrigger": "4"}, clock=lambda: now[0])
    total = lambda offsets: sum(offsets[topic].values())  # noqa: E731
    try:
        limit = reader.getDefaultReadLimit()
        assert limit == ReadMinRows(5)
        start = reader.initialOffset()
        first = reader.latestOffset(start, limit)  # the first trigger never waits
        assert total(first) == 3
        produce(broker, topic, 2, start=3)
        assert reader.latestOffset(first, limit) == first  # 2 new < 5: no batch
        now[0] += 9.9
        assert reader.latestOffset(first, limit) == first  # still within 10 s
        assert total(reader.latestOffset(first, ReadAllAvailable())) == 5  # Trigger.Once
        produce(broker, topic, 3, start=5)
        second = reader.latestOffset(first, limit)  # 5 new: a batch, and the delay restarts
        assert total(second) == 8
        produce(broker, topic, 1, start=8)
        now[0] += 9.9
        assert reader.latestOffset(second, limit) == second
        now[0] += 0.1  # 10 s since the last batch: whatever there is
        assert total(reader.latestOffset(second, limit)) == 9

        # both limits: a batch runs from 2 new records on, and takes at most 4
        assert capped.getDefaultReadLimit() == ReadMinRows(2)
        begin = capped.initialOffset()
        # (9 available; the cap is shared by backlog, rounding down)
        assert 3 <= total(capped.latestOffset(begin, capped.getDefaultReadLimit())) <= 4
        assert 5 <= total(capped.latestOffset(begin, ReadMaxRows(6))) <= 6
    finally:
        reader.stop()
        capped.stop()


def test_query_skips_triggers_below_min_offsets_per_trigger(
    spark: Any, broker: Service, tmp_path: Path
) -> None:
    topic = fresh_topic(broker, partitions=1)
    produce(broker, topic, 3)
    sink = Collector()
    # a progress event for every idle trigger (10 s apart by default), to count them
    key = "spark.sql.streaming.noDataProgressEventInterval"
    spark.conf.set(key, "0")
    try:
        q = start_query(spark, broker, topic, tmp_path, sink, minOffsetsPerTrigger="5",
                        maxTriggerDelay="1h")
    finally:
        spark.conf.unset(key)
    try:
        wait_until(lambda: len(sink.values()) >= 3, timeout=120, what="the first batch")
        produce(broker, topic, 2, start=3)
        produced = time.time()

        def triggers_since() -> int:
            return sum(1 for p in q.recentProgress
                       if _progress_time(p["timestamp"]) > produced)

        wait_until(lambda: triggers_since() >= 3, timeout=60, what="idle triggers")
        assert sink.values() == [0, 1, 2]  # 2 new records < 5: no batch
        produce(broker, topic, 3, start=5)
        wait_until(lambda: len(sink.values()) >= 8, timeout=60, what="the second batch")
        assert sink.values() == list(range(8)) and sink.batch_sizes == [3, 5]
    finally:
        q.stop()


def _progress_time(stamp: str) -> float:
    """A progress event's trigger start (ISO 8601, UTC with a Z) in seconds since the epoch."""
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_trigger_available_now_reads_what_was_there_in_bounded_batches(
    spark: Any, broker: Service, tmp_path: Path
) -> None:
    """Trigger.AvailableNow: up to the offsets of the start, in batches of at most
    maxOffsetsPerTrigger, minOffsetsPerTrigger holding none back; what is written meanwhile
    waits for the next run, which reads just that."""
    topic = fresh_topic(broker)
    produce(broker, topic, 250)

    class WritesDuringFirstBatch(Collector):
        def __call__(self, df: Any, batch_id: int) -> None:
            super().__call__(df, batch_id)
            if len(self.batch_sizes) == 1:
                produce(broker, topic, 30, start=250)  # after the run's target was fixed

    def run(sink: Collector) -> None:
        query = (
            spark.readStream.format("crossbeat-kafka")
            .option("kafka.bootstrap.servers", broker.address).option("subscribe", topic)
            .option("maxOffsetsPerTrigger", "100").option("minOffsetsPerTrigger", "90")
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(120), "the AvailableNow run did not end"
            assert query.exception() is None
        finally:
            query.stop()

    first = WritesDuringFirstBatch()
    run(first)
    assert first.values() == list(range(250))
    assert max(first.batch_sizes) <= 100 and len([n for n in first.batch_sizes if n]) >= 3
    second = Collector()
    run(second)
    assert second.values() == list(range(250, 280))


def _batch(spark: Any, broker: Service, **options: str) -> Any:
    reader = spark.read.format("crossbeat-kafka").option("kafka.bootstrap.servers", broker.address)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_a_batch_read_with_nothing_to_read_is_empty(spark: Any, broker: Service) -> None:
    """As Spark's: an empty DataFrame. PySpark plans a read with no partitions as one
    InputPartition(None), which failed the query with a bare AssertionError."""
    empty = fresh_topic(broker, 2)
    assert _batch(spark, broker, subscribe=empty).collect() == []
    assert _batch(spark, broker, subscribe=f"missing-{uuid.uuid4().hex[:8]}").collect() == []
    produce(broker, empty, 4)
    ends = {str(p): watermarks(broker, empty, p)[1] for p in (0, 1)}  # start where they end
    assert sum(ends.values()) == 4
    at_end = orjson.dumps({empty: ends}).decode()
    assert _batch(spark, broker, subscribe=empty, startingOffsets=at_end).collect() == []


def test_transactions_are_read_uncommitted_by_default_as_spark_does(
    spark: Any, broker: Service,
) -> None:
    """Spark's Kafka source reads with the Java consumer's default, read_uncommitted: an
    aborted transaction's records are read and an open one holds nothing back. librdkafka's
    default, read_committed, dropped the former and held every later record back until the
    open transaction ended. kafka.isolation.level=read_committed is still there to ask."""
    topic = fresh_topic(broker, 1)
    aborted = Producer({"bootstrap.servers": broker.address, "transactional.id": f"ab-{topic}"})
    aborted.init_transactions(30)
    aborted.begin_transaction()
    aborted.produce(topic, b"aborted")
    aborted.flush(30)
    aborted.abort_transaction(30)
    hanging = Producer({"bootstrap.servers": broker.address, "transactional.id": f"op-{topic}",
                        "transaction.timeout.ms": 60000})
    hanging.init_transactions(30)
    hanging.begin_transaction()
    hanging.produce(topic, b"open")
    hanging.flush(30)
    plain = Producer({"bootstrap.servers": broker.address})
    plain.produce(topic, b"after")
    plain.flush(30)
    try:
        values = [r.value for r in _batch(spark, broker, subscribe=topic).collect()]
        assert values == [b"aborted", b"open", b"after"]
        committed = _batch(spark, broker, subscribe=topic,
                           **{"kafka.isolation.level": "read_committed"}).collect()
        assert committed == []  # held at the open transaction; the aborted one dropped
    finally:
        hanging.abort_transaction(30)


def test_a_record_stamped_at_the_epoch_has_that_timestamp(spark: Any, broker: Service) -> None:
    """0 is a timestamp like any other (Spark shows 1970-01-01); it was read as null."""
    import datetime

    from kafka import KafkaProducer

    topic = fresh_topic(broker, 1)
    producer = KafkaProducer(bootstrap_servers=broker.address)
    producer.send(topic, b"epoch", timestamp_ms=0).get(timeout=30)
    producer.close()
    [row] = _batch(spark, broker, subscribe=topic).collect()
    assert row.timestampType == 0
    assert row.timestamp.replace(tzinfo=None) == datetime.datetime.fromtimestamp(0)


def test_named_offsets_must_exist_and_a_start_past_the_end_is_not_read_from_earliest(broker: Service) -> None:
    """As Spark's Kafka source: a partition an offsets JSON names must exist (it was read as
    lost data, or silently ignored); a start past a partition's end fails a batch read
    whatever failOnDataLoss says, and a streaming query starts that partition at its latest
    offset (failOnDataLoss=false) or fails. Records before the requested start were read."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from crossbeat.spark.kafka_client import DataLossError, close_readers
    from crossbeat.spark.source import KafkaBatchReader, KafkaStreamReader

    topic = fresh_topic(broker, partitions=1)
    produce(broker, topic, 3)
    base = {"kafka.bootstrap.servers": broker.address, "subscribe": topic}
    missing = orjson.dumps({topic: {"0": 0, "5": 0}}).decode()
    past = orjson.dumps({topic: {"0": 100}}).decode()
    for lossy in ("true", "false"):
        with pytest.raises(ValueError, match=rf"names {topic}\[5\], which does not exist"):
            KafkaBatchReader({**base, "startingOffsets": missing, "failOnDataLoss": lossy}).partitions()
        with pytest.raises(ValueError, match=rf"names {topic}\[5\], which does not exist"):
            KafkaBatchReader({**base, "endingOffsets": missing, "failOnDataLoss": lossy}).partitions()
        with pytest.raises(ValueError, match="Beginning offset 100 is after the ending offset 3"):
            KafkaBatchReader({**base, "startingOffsets": past, "failOnDataLoss": lossy}).partitions()
    strict = KafkaStreamReader({**base, "startingOffsets": past})
    lenient = KafkaStreamReader({**base, "startingOffsets": past, "failOnDataLoss": "false"})
    try:
        with pytest.raises(ValueError, match=rf"names {topic}\[5\], which does not exist"):
            KafkaStreamReader({**base, "startingOffsets": missing}).initialOffset()
        with pytest.raises(DataLossError, match="startingOffsets 100 is past the end"):
            strict.initialOffset()
        start = lenient.initialOffset()
        assert start == {topic: {"0": 3}}  # its latest offset: a, b, c are not read
        produce(broker, topic, 1, start=3)
        end = lenient.latestOffset(start, ReadAllAvailable())
        rows = [orjson.loads(v)["i"] for p in lenient.partitions(start, end)
                for batch in lenient.read(p) for v in batch.column("value").to_pylist()]
        assert rows == [3]
    finally:
        strict.stop()
        lenient.stop()
        close_readers()
