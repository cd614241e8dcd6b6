"""DeleteRecords from confluent-kafka's and kafka-python's admin clients: the low
watermark moves, fetches below it are out of range, kcat reads from it, and it survives a
restart."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient

from tests.compat.broker.helpers import BrokerProcess, create_topic, produce_all, watermarks

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def _first_error(address: str, topic: str, offset: int) -> int:
    """The error a consumer assigned at `offset` gets when it must not reset by itself."""
    c = Consumer({"bootstrap.servers": address, "group.id": "oor",
                  "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, 0, offset)])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None:
                assert msg.error() is not None, f"read offset {msg.offset()}"
                code: int = msg.error().code()
                return code
        raise AssertionError("no error within 20 s")
    finally:
        c.close()


def _kcat_offsets(address: str, topic: str) -> list[int]:
    kcat = shutil.which("kcat")
    assert kcat is not None
    out = subprocess.run([kcat, "-b", address, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                          "-e", "-q", "-f", "%o\\n"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    return [int(line) for line in out.split()]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_delete_records(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.address, topic_name, 1)
    produce_all(broker.address, topic_name, [(None, b"v%d" % i) for i in range(10)], acks="all",
                **{"linger.ms": 0, "batch.num.messages": 1})
    admin = AdminClient({"bootstrap.servers": broker.address})
    deleted = admin.delete_records([TopicPartition(topic_name, 0, 4)])
    (result,) = deleted.values()
    assert result.result(20).low_watermark == 4
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        (beyond,) = admin.delete_records([TopicPartition(topic_name, 0, 11)]).values()
        beyond.result(20)
    assert watermarks(broker.address, topic_name) == (4, 10)
    assert _first_error(broker.address, topic_name, 2) == KafkaError._AUTO_OFFSET_RESET
    assert _kcat_offsets(broker.address, topic_name) == list(range(4, 10))

    kp = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        kp.delete_records({KpTopicPartition(topic_name, 0): 7})
    finally:
        kp.close()
    broker.stop()
    broker.start()
    assert watermarks(broker.address, topic_name) == (7, 10)
    admin = AdminClient({"bootstrap.servers": broker.address})
    (to_end,) = admin.delete_records([TopicPartition(topic_name, 0, OFFSET_END)]).values()
    assert to_end.result(20).low_watermark == 10
    assert _kcat_offsets(broker.address, topic_name) == []
