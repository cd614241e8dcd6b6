"""acks=all against a topic whose min.insync.replicas exceeds its in-sync replicas (one, on
this single node): NOT_ENOUGH_REPLICAS and nothing written, as Kafka; acks=1 is unaffected."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat.broker.helpers import BrokerProcess

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def produce_one(address: str, topic: str, acks: str) -> tuple[str | None, int]:
    """Produce one message without retries: (error name or None, offset)."""
    producer = Producer({"bootstrap.servers": address, "acks": acks, "retries": 0,
                         "message.timeout.ms": 20000})
    reports: list[tuple[Any, Any]] = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(30) == 0
    ((err, msg),) = reports
    return (err.name() if err is not None else None), msg.offset()


def test_acks_all_needs_min_insync_replicas(broker: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.address})
    topic = NewTopic(topic_name, 1, 1, config={"min.insync.replicas": "2"})
    admin.create_topics([topic])[topic_name].result(20)

    error, _ = produce_one(broker.address, topic_name, "all")
    assert error == "NOT_ENOUGH_REPLICAS"
    watermarks = Consumer({"bootstrap.servers": broker.address, "group.id": "wm"})
    try:
        assert watermarks.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, 0)
        assert produce_one(broker.address, topic_name, "1") == (None, 0)
        assert watermarks.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, 1)
    finally:
        watermarks.close()
