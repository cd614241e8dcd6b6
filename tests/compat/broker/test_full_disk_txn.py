"""Transactions on a full disk: a transaction state change takes effect only once the
transaction log holds it, so a commit whose decision (PrepareCommit) the disk refuses
commits nothing anywhere, fails retriably, and commits once when retried after space is
freed; markers a full disk refused in some partitions are retried in those only (one
marker per partition); and a broker with transactional ids in its log starts on a full
disk."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from tests.compat.broker.helpers import BrokerProcess, consume_n, create_topic
from tests.support.smallfs import fill

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]
PAGE = 4096  # tmpfs gives a file space a page at a time
MARKER = 78  # a COMMIT/ABORT control batch on disk: 61-byte batch header, one 17-byte record


@pytest.fixture
def broker(broker_on_small_fs: BrokerProcess) -> BrokerProcess:
    return broker_on_small_fs


def transactional(address: str) -> Producer:
    producer = Producer({"bootstrap.servers": address, "transactional.id": "tx",
                         "compression.type": "none", "linger.ms": 0})
    producer.init_transactions(20)
    return producer


def high_watermarks(address: str, topic: str, partitions: int) -> list[int]:
    # read_uncommitted: a read_committed consumer is told the last stable offset instead
    consumer = Consumer({"bootstrap.servers": address, "group.id": "wm",
                         "isolation.level": "read_uncommitted"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def read_committed(address: str, topic: str, partitions: int,
                   expected: int) -> list[tuple[int, bytes]]:
    """(partition, value) of the first `expected` messages a read_committed consumer gets,
    assigned (no group: nothing for the broker to write)."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    try:
        return sorted((m.partition(), m.value()) for m in consume_n(consumer, expected))
    finally:
        consumer.close()


def slack(path: Path) -> int:
    """Bytes a full disk still lets `path` grow by: the rest of its last page."""
    return -path.stat().st_size % PAGE


def segment_holding(data_dir: Path, payload: bytes) -> Path:
    [segment] = [p for p in (data_dir / "streams").rglob("*.log") if payload in p.read_bytes()]
    return segment


def test_a_commit_whose_decision_the_disk_refuses_commits_nothing_until_retried(
    broker: BrokerProcess, small_fs: Path
) -> None:
    """Before, PrepareCommit was set in memory before its write: the markers went out from
    memory while the log said Ongoing, and the retried EndTxn was answered as done."""
    topic = "t" * 200  # a PrepareCommit line naming 24 partitions is longer than a page:
    partitions = 24    # a full disk cannot take it, wherever the log ends
    create_topic(broker.address, topic, partitions)
    producer = transactional(broker.address)
    producer.begin_transaction()
    for p in range(partitions):
        producer.produce(topic, b"v%d" % p, partition=p)
    assert producer.flush(20) == 0
    filler = small_fs / "filler"
    fill(filler)

    with pytest.raises(KafkaException) as failed:
        producer.commit_transaction(4)
    assert failed.value.args[0].retriable()
    # no partition got a marker (each holds its one message), during the 4 s of retries
    assert high_watermarks(broker.address, topic, partitions) == [1] * partitions

    filler.unlink()
    producer.commit_transaction(30)  # resumed: committed now, one marker per partition
    assert high_watermarks(broker.address, topic, partitions) == [2] * partitions
    assert read_committed(broker.address, topic, partitions, partitions) == [
        (p, b"v%d" % p) for p in range(partitions)]


def test_markers_the_disk_refused_are_retried_only_where_they_failed(
    broker: BrokerProcess, small_fs: Path
) -> None:
    """PrepareCommit durable, partition 0's marker written, partition 1's refused: each
    retry (EndTxn's and the coordinator's own, every 0.1 s) appended another COMMIT
    marker to partition 0."""
    data_dir = small_fs / "data"
    create_topic(broker.address, "tx", 2)
    plain = Producer({"bootstrap.servers": broker.address, "compression.type": "none",
                      "linger.ms": 0})
    tags = [b"tag-%d-%s" % (p, uuid.uuid4().hex.encode()) for p in range(2)]
    for p, tag in enumerate(tags):
        plain.produce("tx", tag, partition=p)
    assert plain.flush(20) == 0
    segments = [segment_holding(data_dir, tag) for tag in tags]
    txn_log = data_dir / "transactions.log"

    producer = transactional(broker.address)
    for _ in range(50):  # until the transaction log has room for the PrepareCommit line
        producer.begin_transaction()
        producer.produce("tx", b"m", partition=0)
        producer.produce("tx", b"m", partition=1)
        assert producer.flush(20) == 0
        if slack(txn_log) >= 512:
            break
        producer.commit_transaction(20)
    else:
        pytest.fail("the transaction log never had room left in its last page")
    assert slack(segments[0]) >= MARKER
    for _ in range(100):  # until partition 1 has no room for a marker
        room = slack(segments[1])
        if room < MARKER:
            break
        # a batch of one record: 61 bytes of header, 12 of record, and the value
        plain.produce("tx", b"p" * max(room - 61 - 12 - MARKER + 10, 1), partition=1)
        assert plain.flush(20) == 0
    else:
        pytest.fail("partition 1 never ran out of room in its last page")
    before = high_watermarks(broker.address, "tx", 2)
    filler = small_fs / "filler"
    fill(filler)

    with pytest.raises(KafkaException):
        producer.commit_transaction(4)
    assert high_watermarks(broker.address, "tx", 2) == [before[0] + 1, before[1]]
    # the coordinator retried every 0.1 s meanwhile, and said so once (a full disk must not
    # fill the log too)
    assert broker.output().count("cannot finish the transaction") == 1

    filler.unlink()
    producer.commit_transaction(30)
    assert high_watermarks(broker.address, "tx", 2) == [before[0] + 1, before[1] + 1]


def test_the_broker_starts_on_a_full_disk_with_transactions_in_its_log(
    broker: BrokerProcess, small_fs: Path
) -> None:
    """Opening rewrote transactions.log every time: on a full disk the broker could not
    start, and the rewrite left transactions.tmp behind."""
    create_topic(broker.address, "tx", 1)
    producer = transactional(broker.address)
    producer.begin_transaction()
    producer.produce("tx", b"committed", partition=0)
    producer.commit_transaction(20)  # the log now holds superseded lines: compaction is due
    fill(small_fs / "filler")
    broker.stop()  # on the full disk: its segment indexes are left to rebuild, no space freed

    broker.start()
    assert read_committed(broker.address, "tx", 1, 1) == [(0, b"committed")]
    assert not list((small_fs / "data").glob("*.tmp"))
    assert "Traceback" not in broker.output()
    assert os.path.getsize(small_fs / "data" / "transactions.log") > 0
