"""Topic admin on a full disk (or one out of inodes): every request the disk refuses is
KAFKA_STORAGE_ERROR (56) for its topic or partition, as Kafka answers for a failed log
directory, with no traceback and the connection kept (before, the OSError escaped the
handler and the connection was reset); the topic stays as it was, in memory, on disk and
after a restart; and once space is freed the same requests succeed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from tests.compat.broker.helpers import BrokerProcess, create_topic, read_topic, watermarks
from tests.support.smallfs import fill

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]
KiB = 1024
PAGE = 4096  # tmpfs allocates whole pages
STORAGE_ERROR = KafkaError.KAFKA_STORAGE_ERROR


@pytest.fixture
def broker(broker_on_small_fs: BrokerProcess) -> BrokerProcess:
    return broker_on_small_fs


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.address})


def error_code(future: Any) -> int | None:
    """The Kafka error code a request's future ends with (None for success)."""
    try:
        future.result(timeout=20)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def partition_counts(broker: BrokerProcess) -> dict[str, int]:
    metadata = admin(broker).list_topics(timeout=20)
    return {name: len(t.partitions) for name, t in metadata.topics.items()}


def retention_ms(broker: BrokerProcess, topic: str) -> str:
    resource = ConfigResource("topic", topic)
    client = admin(broker)  # referenced until the result is in: a dropped client ends its futures
    configs = client.describe_configs([resource])[resource].result(timeout=20)
    return str(configs["retention.ms"].value)


def stream_configs(broker: BrokerProcess) -> dict[str, dict[str, str]]:
    """Every stream's persisted config, by stream name, as the next start will read it."""
    placement = json.loads((broker.data_dir / "streams" / "placement.json").read_text())
    return {name: s["config"] for name, s in placement["streams"].items()}


def produce(broker: BrokerProcess, topic: str, count: int) -> None:
    """`count` messages to partition 0 of `topic`, every one acknowledged."""
    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 5})
    errors: list[Any] = []
    for i in range(count):
        producer.produce(topic, b"m%d" % i, partition=0,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0
    assert errors == []


def commit(broker: BrokerProcess, topic: str, offset: int) -> None:
    """Group "g" commits `offset` for partition 0 of `topic`."""
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "g",
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def committed(broker: BrokerProcess, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "g"})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=20)[0].offset)
    finally:
        consumer.close()


def assert_no_traceback(broker: BrokerProcess) -> None:
    output = broker.output()
    assert "Traceback" not in output
    assert "failed; closing" not in output  # no request ended its connection


def without_reserve(small_fs: Path) -> None:
    """Give up the stream store's space reserve (crossbeat.stream.reserve), which would let
    a DeleteTopics or DeleteRecords through on a full disk."""
    (small_fs / "data" / "streams" / "space.reserve").unlink()


def test_topic_admin_on_a_full_disk_is_a_storage_error_that_changes_nothing(
    broker: BrokerProcess, small_fs: Path
) -> None:
    create_topic(broker.address, "kept", 2)
    produce(broker, "kept", 10)
    filler = small_fs / "filler"
    without_reserve(small_fs)
    fill(filler)
    client = admin(broker)
    retention = ConfigResource("topic", "kept", incremental_configs=[
        ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET)])
    assert error_code(client.create_topics([NewTopic("new", 3, 1)])["new"]) == STORAGE_ERROR
    assert error_code(client.create_partitions([NewPartitions("kept", 4)])["kept"]) == STORAGE_ERROR
    assert error_code(client.incremental_alter_configs([retention])[retention]) == STORAGE_ERROR
    assert error_code(client.delete_topics(["kept"])["kept"]) == STORAGE_ERROR

    assert partition_counts(broker) == {"kept": 2}
    assert retention_ms(broker, "kept") == "604800000"
    assert watermarks(broker.address, "kept") == (0, 10)
    assert_no_traceback(broker)
    assert "No space left on device" in broker.output()

    filler.unlink()
    assert error_code(client.create_topics([NewTopic("new", 3, 1)])["new"]) is None
    assert error_code(client.create_partitions([NewPartitions("kept", 4)])["kept"]) is None
    assert error_code(client.incremental_alter_configs([retention])[retention]) is None
    assert partition_counts(broker) == {"kept": 4, "new": 3}
    assert retention_ms(broker, "kept") == "12345"


def test_delete_records_the_full_disk_refuses_is_a_storage_error(
    broker: BrokerProcess, small_fs: Path
) -> None:
    create_topic(broker.address, "trim", 1)
    produce(broker, "trim", 10)
    client = admin(broker)

    def delete_records(offset: int) -> int | None:
        [future] = client.delete_records([TopicPartition("trim", 0, offset)]).values()
        return error_code(future)

    fill(small_fs / "filler")
    if delete_records(3) is None:
        # the store gave up its space reserve so that the start could move and free space
        # (crossbeat.stream.reserve): take that space too
        fill(small_fs / "filler2")
        expected_low = 3
    else:
        expected_low = 0
    assert delete_records(5) == STORAGE_ERROR
    assert watermarks(broker.address, "trim") == (expected_low, 10)
    assert_no_traceback(broker)
    (small_fs / "filler").unlink()
    (small_fs / "filler2").unlink(missing_ok=True)
    assert delete_records(5) is None
    assert watermarks(broker.address, "trim") == (5, 10)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_a_legacy_alter_on_a_full_disk_is_a_storage_error(
    broker: BrokerProcess, small_fs: Path
) -> None:
    create_topic(broker.address, "cfg", 1)
    fill(small_fs / "filler")
    legacy = ConfigResource("topic", "cfg", set_config={"retention.ms": "12345"})
    client = admin(broker)
    assert error_code(client.alter_configs([legacy])[legacy]) == STORAGE_ERROR
    assert retention_ms(broker, "cfg") == "604800000"
    assert_no_traceback(broker)


def test_a_delete_the_full_disk_refused_keeps_the_topic_and_its_offsets(
    broker: BrokerProcess, small_fs: Path
) -> None:
    """Before, the topic left memory before the disk refused to forget it: gone from
    Metadata, back after a restart. Its groups' committed offsets stay too (their removal
    fits in the offsets log's last page, which a full disk still has room in)."""
    create_topic(broker.address, "doomed", 2)
    produce(broker, "doomed", 5)
    commit(broker, "doomed", 3)
    filler = small_fs / "filler"
    without_reserve(small_fs)
    fill(filler)
    client = admin(broker)
    assert error_code(client.delete_topics(["doomed"])["doomed"]) == STORAGE_ERROR
    assert partition_counts(broker) == {"doomed": 2}
    assert watermarks(broker.address, "doomed") == (0, 5)
    assert committed(broker, "doomed") == 3
    assert_no_traceback(broker)

    filler.unlink()
    broker.stop()
    broker.start()
    assert partition_counts(broker) == {"doomed": 2}
    assert committed(broker, "doomed") == 3
    assert len(read_topic(broker.address, "doomed", 5)) == 5
    client = admin(broker)
    assert error_code(client.delete_topics(["doomed"])["doomed"]) is None
    broker.stop()
    broker.start()
    assert partition_counts(broker) == {}


def test_deleting_a_topic_frees_a_full_disk(broker: BrokerProcess, small_fs: Path) -> None:
    """The placement write that must precede deleting a topic's files spends the store's
    space reserve when the disk is full: the way an operator frees a full disk works."""
    create_topic(broker.address, "big", 1)
    produce(broker, "big", 10)
    fill(small_fs / "filler")
    client = admin(broker)  # held: a client destroyed fails its futures (_DESTROY)
    assert error_code(client.delete_topics(["big"])["big"]) is None
    assert partition_counts(broker) == {}
    assert os.statvfs(small_fs).f_bavail > 0
    assert_no_traceback(broker)
    broker.stop()
    broker.start()
    assert partition_counts(broker) == {}


def test_metadata_that_would_create_a_topic_on_a_full_disk_answers_a_storage_error(
    broker: BrokerProcess, small_fs: Path
) -> None:
    """Auto-creation refused by the disk is the topic's error in the Metadata response (as
    Kafka answers a topic its auto-creation failed for); the producer waits and delivers once
    space is freed. Before, every Metadata request naming the topic reset the connection."""
    filler = small_fs / "filler"
    fill(filler)
    producer = Producer({"bootstrap.servers": broker.address, "message.timeout.ms": 60000})
    metadata = producer.list_topics("auto", timeout=20)
    error = metadata.topics["auto"].error
    assert error is not None and error.code() == STORAGE_ERROR
    reports: list[Any] = []
    producer.produce("auto", b"waited", on_delivery=lambda err, msg: reports.append(err))
    assert_no_traceback(broker)

    filler.unlink()
    assert producer.flush(45) == 0
    assert reports == [None]
    assert partition_counts(broker) == {"auto": 1}


def test_a_create_or_growth_the_full_disk_cut_short_leaves_nothing_behind(
    broker: BrokerProcess, small_fs: Path
) -> None:
    """A topic of many partitions on a nearly full disk: before, the partitions created
    before the disk filled stayed, a restart on the full disk failed (it tried to create the
    rest) and a restart after freeing space completed the topic the client was told had
    failed. Now all of a topic's new streams are recorded in one write or none is."""
    create_topic(broker.address, "grown", 1)
    filler = small_fs / "filler"
    fill(filler, leave=24 * KiB)
    client = admin(broker)
    assert error_code(client.create_topics([NewTopic("big", 200, 1)])["big"]) == STORAGE_ERROR
    assert error_code(client.create_partitions([NewPartitions("grown", 200)])["grown"]) == STORAGE_ERROR
    assert partition_counts(broker) == {"grown": 1}
    assert_no_traceback(broker)

    broker.stop()
    broker.start()  # the disk still full
    assert partition_counts(broker) == {"grown": 1}
    filler.unlink()
    broker.stop()
    broker.start()
    assert partition_counts(broker) == {"grown": 1}
    assert set(stream_configs(broker)) == {"grown-0"}


def test_an_alter_the_full_disk_cut_short_is_undone(broker: BrokerProcess, small_fs: Path) -> None:
    """The disk has room for a few of the alter's per-partition writes, not all: before,
    the partitions written kept the new configs (partition 0 among them, the copy a restart
    trusts, so the restart completed the alter the client was told had failed)."""
    create_topic(broker.address, "cfg", 100)
    placement = broker.data_dir / "streams" / "placement.json"
    pages = -(-placement.stat().st_size // PAGE)
    # one page more than the file's: the writes go on until the file needs a page more
    filler = small_fs / "filler"
    fill(filler, leave=(pages + 1) * PAGE)
    new = {"retention.ms": "3600000", "retention.bytes": "1048576000",
           "segment.ms": "3600000", "segment.bytes": "104857600",
           "max.message.bytes": "2097152", "message.timestamp.type": "LogAppendTime",
           "min.insync.replicas": "1", "compression.type": "producer"}  # ~300 bytes a write
    resource = ConfigResource("topic", "cfg", incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in new.items()])
    client = admin(broker)
    assert error_code(client.incremental_alter_configs([resource])[resource]) == STORAGE_ERROR
    assert retention_ms(broker, "cfg") == "604800000"
    assert all("retention.ms" not in config for config in stream_configs(broker).values())
    assert_no_traceback(broker)

    broker.stop()
    broker.start()  # the disk still full
    assert retention_ms(broker, "cfg") == "604800000"
    assert all("retention.ms" not in config for config in stream_configs(broker).values())


def test_repairs_the_full_disk_refuses_at_start_do_not_stop_the_broker(
    broker: BrokerProcess, small_fs: Path
) -> None:
    """Start finishes what a crash interrupted (an alter, or a growth by an older version
    that added partitions one by one); a full disk refusing that repair failed the start.
    Now it is logged, the broker serves what it has, and a later start repairs."""
    from crossbeat.stream.placement import PlacementDriver

    create_topic(broker.address, "altered", 2)
    create_topic(broker.address, "grown", 3)
    broker.stop()
    placement = PlacementDriver(broker.data_dir / "streams" / "placement.json")
    # a crash after partition 1 took an alter, before partition 0 did
    placement.update_config("altered-1", {**placement.get("altered-1").config, "retention.ms": "5"})
    # a crash before the last partition was created: neither its placement nor its files
    gone_id = placement.get("grown-2").id
    placement.delete_stream("grown-2")
    shutil.rmtree(broker.data_dir / "streams" / "ranges" / str(gone_id))
    filler = small_fs / "filler"
    fill(filler)
    broker.start()
    assert partition_counts(broker) == {"altered": 2, "grown": 2}
    assert retention_ms(broker, "altered") == "604800000"
    assert "Traceback" not in broker.output()

    filler.unlink()
    broker.stop()
    broker.start()
    assert partition_counts(broker) == {"altered": 2, "grown": 3}
    assert "retention.ms" not in stream_configs(broker)["altered-1"]


def test_a_create_out_of_inodes_leaves_nothing_behind(broker: BrokerProcess, small_fs: Path) -> None:
    """The placement was written before the replica directory, which the filesystem had no
    inode for: a retry then found the stream taken and reset the connection, and the topic
    came back after a restart though the client was told it failed."""
    stat = os.statvfs(small_fs)
    used = stat.f_files - stat.f_ffree

    def remount(inodes: int) -> None:
        subprocess.run(["mount", "-o", f"remount,nr_inodes={inodes}", str(small_fs)], check=True)

    remount(used + 1)
    client = admin(broker)
    try:
        assert error_code(client.create_topics([NewTopic("ino", 1, 1)])["ino"]) == STORAGE_ERROR
    finally:
        remount(100000)
    assert partition_counts(broker) == {}
    assert_no_traceback(broker)
    broker.stop()
    broker.start()
    assert partition_counts(broker) == {}
    client = admin(broker)
    assert error_code(client.create_topics([NewTopic("ino", 1, 1)])["ino"]) is None
    assert partition_counts(broker) == {"ino": 1}
