"""A full disk under the broker: a produce that finds no space is KAFKA_STORAGE_ERROR (56)
for its partition, as Kafka answers (librdkafka retries it), with no traceback and the
connection kept; the failed appends take no offsets, every acknowledged message is read
back at its offset, and once space is freed producing works again."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat.broker.helpers import BrokerProcess, create_topic
from tests.support.procs import wait_until
from tests.support.smallfs import fill, small_filesystem

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]
KiB = 1024


@pytest.fixture
def broker(broker_on_small_fs: BrokerProcess) -> BrokerProcess:
    return broker_on_small_fs


def produce(
    address: str, topic: str, values: list[bytes], timeout_ms: int = 30000
) -> list[tuple[int | None, KafkaError | None]]:
    """(offset, error) per message; no retries, so a refusal is the broker's own answer."""
    producer = Producer({"bootstrap.servers": address, "acks": "all", "enable.idempotence": False,
                         "retries": 0, "linger.ms": 0, "message.timeout.ms": timeout_ms})
    results: list[tuple[int | None, KafkaError | None]] = []
    for value in values:
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda err, msg: results.append((None if err else msg.offset(), err)))
        producer.flush(30)  # one at a time: the order of results is the order sent
    return results


def read_all(address: str, topic: str, end: int) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": address, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes]] = []
    try:
        for _ in range(200):
            if len(got) >= end:
                break
            for msg in consumer.consume(100, timeout=0.5):
                if msg.error() is None:
                    got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def test_produce_to_a_full_disk_is_a_storage_error_and_loses_nothing(
    broker: BrokerProcess, small_fs: Path
) -> None:
    create_topic(broker.address, "full", 1)
    filler = small_fs / "filler"
    fill(filler, leave=1024 * KiB)  # about 1 MiB left: room for a few of the messages below
    values = [os.urandom(100 * KiB) for _ in range(30)]
    results = produce(broker.address, "full", values)
    acked = [(offset, value) for (offset, err), value in zip(results, values, strict=True) if err is None]
    refused = [err for _, err in results if err is not None]
    assert acked and refused
    assert {err.code() for err in refused} == {KafkaError.KAFKA_STORAGE_ERROR}
    # the refused appends took no offsets: the acknowledged ones are dense from 0
    assert [offset for offset, _ in acked] == list(range(len(acked)))

    filler.unlink()
    after = os.urandom(100 * KiB)
    assert produce(broker.address, "full", [after]) == [(len(acked), None)]
    assert read_all(broker.address, "full", len(acked) + 1) == [*acked, (len(acked), after)]
    assert "Traceback" not in broker.output()
    assert "No space left on device" in broker.output()


def test_an_offset_commit_a_full_disk_cut_short_does_not_cost_later_ones(
    broker: BrokerProcess, small_fs: Path
) -> None:
    """A commit line written only in part (the disk filled mid-line) is cut back off: before,
    the next commit followed the torn line, and the restart cut the file there, losing it."""
    create_topic(broker.address, "commits", 1)
    big = "m" * 3000  # commit metadata: a line that cannot fit in what is left of a page

    def commit(offset: int) -> None:
        consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "g",
                             "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition("commits", 0, offset, big)], asynchronous=False)
        finally:
            consumer.close()

    def committed() -> int:
        consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "g"})
        try:
            return int(consumer.committed([TopicPartition("commits", 0)], timeout=20)[0].offset)
        finally:
            consumer.close()

    commit(5)
    filler = small_fs / "filler"
    fill(filler)
    with pytest.raises(KafkaException) as refused:
        commit(7)
    # Kafka's answer to a storage error there, which clients take as retriable
    assert refused.value.args[0].code() == KafkaError.NOT_COORDINATOR, refused.value
    assert committed() == 5
    filler.unlink()
    commit(9)
    broker.stop()
    broker.start()
    assert committed() == 9
    assert "cutting" not in broker.output()  # nothing torn to cut at the restart


def test_a_segment_roll_a_full_disk_refused_is_tried_again(broker: BrokerProcess, small_fs: Path) -> None:
    """The roll to a new segment writes the old one's indexes: refused by a full disk, it
    left the segment marked full, and every later append rolled again and found it rolled,
    for ever (the broker spun and the produce never got an answer, space freed or not)."""
    admin = AdminClient({"bootstrap.servers": broker.address})
    topic = NewTopic("rolls", num_partitions=1, replication_factor=1,
                     config={"segment.bytes": str(1024 * KiB)})
    admin.create_topics([topic])["rolls"].result(timeout=20)
    values = [os.urandom(60 * KiB) for _ in range(17)]  # 1020 KiB: the next one rolls
    assert [err for _, err in produce(broker.address, "rolls", values)] == [None] * 17
    filler = small_fs / "filler"
    fill(filler)
    [(_, err)] = produce(broker.address, "rolls", [os.urandom(60 * KiB)])
    assert err is not None and err.code() == KafkaError.KAFKA_STORAGE_ERROR
    filler.unlink()
    after = os.urandom(60 * KiB)
    assert produce(broker.address, "rolls", [after], timeout_ms=10000) == [(17, None)]
    assert read_all(broker.address, "rolls", 18)[-1] == (17, after)


def test_retention_frees_a_full_disk_and_the_broker_stops_cleanly_on_one(tmp_path: Path) -> None:
    """Freeing expired segments first rewrites the placement file, which a disk with no byte
    left refused: retention could never free it. The store keeps a few MiB in reserve for
    that rewrite. A broker stopped on a full disk exits 0 (its indexes, derived data, are
    rebuilt at the next start) instead of failing half-closed."""
    (tmp_path / "mnt").mkdir()
    config = tmp_path / "broker.toml"
    config.write_text("[broker]\nretention_check_interval_ms = 500\n")
    with small_filesystem(tmp_path / "mnt", 16) as mnt:
        broker = BrokerProcess(mnt / "data", extra=["--config", str(config)])
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.address})
            topic = NewTopic("expiring", num_partitions=1, replication_factor=1,
                             config={"segment.bytes": str(1024 * KiB), "retention.ms": "2000"})
            admin.create_topics([topic])["expiring"].result(timeout=20)
            producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 5})
            for _ in range(6000):  # about 6 MiB in 1 MiB segments
                producer.produce("expiring", os.urandom(1000))
                producer.poll(0)
            assert producer.flush(30) == 0
            fill(mnt / "filler")
            wait_until(lambda: os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize > 4 * 1024 * KiB,
                       timeout=60, what="retention freeing the expired segments")
            producer.produce("expiring", os.urandom(1000))  # an active segment to close
            assert producer.flush(30) == 0
            fill(mnt / "filler2")
            assert broker.stop() == 0
            assert "not saved (rebuilt when next opened)" in broker.output()  # the disk was full
            assert "Traceback" not in broker.output()
            broker.start()  # and the indexes are rebuilt
            assert read_all(broker.address, "expiring", 1)
        finally:
            if broker.service is not None and broker.service.proc.poll() is None:
                broker.stop()
