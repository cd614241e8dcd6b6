"""Damaged segment files found at a restart, seen by real clients: the records after the
damage stay readable, offsets are never handed out twice (a consumer group committed past
the damage does not skip new records), and batches before index-covered damage are served
instead of a KAFKA_STORAGE_ERROR retried for ever."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from crossbeat.stream.batch import scan
from tests.compat.broker.helpers import BrokerProcess, new_consumer, produce_all, watermarks
from tests.support.procs import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

RECORDS = 60
VALUE_BYTES = 60000  # with 1 MiB segments (the least allowed): 4 segments, indexed batches


def _value(i: int) -> bytes:
    return b"v%04d|" % i + b"x" * VALUE_BYTES


def _create(address: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1,
                  config={"segment.bytes": "1048576"})], operation_timeout=10)
    futures[topic].result(timeout=20)


def _fill(broker: BrokerProcess, topic: str, committed_group: str | None = None) -> list[Path]:
    """Produce RECORDS records (and have `committed_group` commit offset RECORDS), stop the
    broker; the topic's segment files, oldest first."""
    _create(broker.address, topic)
    for i in range(RECORDS):  # one batch each
        produce_all(broker.address, topic, [(None, _value(i))], **{"linger.ms": 0})
    if committed_group is not None:
        committer = Consumer({"bootstrap.servers": broker.address, "group.id": committed_group,
                              "enable.auto.commit": False})
        committer.commit(offsets=[TopicPartition(topic, 0, RECORDS)], asynchronous=False)
        committer.close()
    broker.stop()
    segments = sorted((broker.data_dir / "streams" / "ranges").glob("*/*/*.log"))
    assert len(segments) >= 3
    return segments


def _read_from(address: str, topic: str, start: int, until: int) -> list[tuple[int, bytes]]:
    """(offset, value) of what a consumer assigned at `start` gets, up to offset `until` - 1
    (bounded in time)."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, start)])
    got: list[tuple[int, bytes]] = []

    def done() -> bool:
        for msg in consumer.consume(100, timeout=0.2):
            if msg.error() is None:
                got.append((msg.offset(), msg.value()))
        return bool(got) and got[-1][0] >= until - 1

    try:
        wait_until(done, timeout=30, what=f"records up to offset {until - 1}")
    finally:
        consumer.close()
    return got


def test_truncated_middle_segment_keeps_later_records_and_never_reuses_offsets(
    broker: BrokerProcess, topic_name: str
) -> None:
    segments = _fill(broker, topic_name, committed_group="G")
    middle, after = segments[1], segments[2]
    middle.write_bytes(middle.read_bytes()[:-100])  # tear its last batch
    broker.start()
    address = broker.address

    assert watermarks(address, topic_name) == (0, RECORDS)
    new = produce_all(address, topic_name, [(None, b"NEW-%d" % i) for i in range(3)],
                      **{"linger.ms": 0})
    assert [offset for _p, offset, _v in new] == [RECORDS, RECORDS + 1, RECORDS + 2]

    # the group committed past the damage resumes at exactly the new records
    member = new_consumer(address, "G")
    member.subscribe([topic_name])
    got: list[Any] = []

    def three() -> bool:
        msg = member.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append((msg.offset(), msg.value()))
        return len(got) >= 3

    try:
        wait_until(three, timeout=30, what="the new records")
    finally:
        member.close()
    assert got == [(RECORDS + i, b"NEW-%d" % i) for i in range(3)]

    # a reader from the start gets everything but the torn batch, across the gap
    everything = _read_from(address, topic_name, 0, RECORDS + 3)
    lost = int(after.stem) - 1
    assert [o for o, _v in everything] == [o for o in range(RECORDS + 3) if o != lost]
    assert all(v == _value(o) for o, v in everything if o < RECORDS)
    assert str(middle) in broker.output()


def test_damage_inside_indexed_batches_serves_the_records_before_it(
    broker: BrokerProcess, topic_name: str
) -> None:
    segments = _fill(broker, topic_name)
    first = segments[0]
    index = first.with_suffix(".index").read_bytes()
    entries = [struct.unpack_from(">II", index, i) for i in range(0, len(index), 8)]
    assert len(entries) >= 2  # the damaged batch lies before the last index entry
    damaged_pos = entries[0][1]
    positions = scan(first.read_bytes()).positions
    damaged_offset = positions.index(damaged_pos)  # one record per batch, base offset 0
    with first.open("r+b") as fh:  # flip the length field of that batch
        fh.seek(damaged_pos + 9)
        byte = fh.read(1)
        fh.seek(damaged_pos + 9)
        fh.write(bytes([byte[0] ^ 0xFF]))
    broker.start()

    got = _read_from(broker.address, topic_name, 0, damaged_offset)
    assert got == [(o, _value(o)) for o in range(damaged_offset)]
    output = broker.output()
    assert str(first) in output and f"byte {damaged_pos}" in output
