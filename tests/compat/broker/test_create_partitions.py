"""CreatePartitions from confluent-kafka's and kafka-python's admin clients: new partitions
appear in metadata, producers write to them and consumer groups of both protocols (classic
and KIP-848) read them without restarting; the growth survives a restart."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions

from tests.compat.broker.helpers import BrokerProcess, create_topic

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def _consumer(address: str, group: str, topic: str, **config: Any) -> Any:
    c = Consumer({"bootstrap.servers": address, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "topic.metadata.refresh.interval.ms": 300, **config})
    c.subscribe([topic])
    return c


def _partitions(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def test_grow_and_use(broker: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.address})
    create_topic(broker.address, topic_name, 1)
    classic = _consumer(broker.address, "grow-classic", topic_name)
    modern = _consumer(broker.address, "grow-848", topic_name, **{"group.protocol": "consumer"})

    with pytest.raises(KafkaException, match="INVALID_PARTITIONS"):
        admin.create_partitions([NewPartitions(topic_name, 1)])[topic_name].result(20)
    admin.create_partitions([NewPartitions(topic_name, 3)], validate_only=True)[topic_name].result(20)
    assert _partitions(admin, topic_name) == 1
    admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(20)
    assert _partitions(admin, topic_name) == 3

    producer = Producer({"bootstrap.servers": broker.address})
    producer.produce(topic_name, b"p2", partition=2)
    assert producer.flush(20) == 0
    got: dict[str, set[tuple[int, bytes]]] = {"classic": set(), "848": set()}
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and not all(got.values()):
        for name, c in (("classic", classic), ("848", modern)):
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                got[name].add((msg.partition(), msg.value()))
    classic.close()
    modern.close()
    assert got == {"classic": {(2, b"p2")}, "848": {(2, b"p2")}}

    kp = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        kp.create_partitions({topic_name: KpNewPartitions(total_count=5)})
    finally:
        kp.close()
    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.address})
    assert _partitions(admin, topic_name) == 5
