"""OffsetDelete from kafka-python's admin client (confluent-kafka's has no call for it):
offsets of a topic a live member (classic or KIP-848) subscribes to are refused, others
go, durably; confluent-kafka's admin client sets and lists the offsets."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import GroupIdNotFoundError

from tests.compat.broker.helpers import BrokerProcess, create_topic, produce_all

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def _member(address: str, group: str, topic: str, **config: Any) -> Any:
    c = Consumer({"bootstrap.servers": address, "group.id": group, "enable.auto.commit": False,
                  **config})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.1)
    assert c.assignment(), "the member never got its partition"
    return c


def _offsets(admin: AdminClient, group: str, *topics: str) -> dict[str, int]:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(t, 0) for t in topics])
    (future,) = admin.list_consumer_group_offsets([req]).values()
    return {tp.topic: tp.offset for tp in future.result(20).topic_partitions}


def _delete(address: str, group: str, *topics: str) -> dict[str, str]:
    kp = KafkaAdminClient(bootstrap_servers=address)
    try:
        result = kp.delete_group_offsets(group, [KpTopicPartition(t, 0) for t in topics])
    finally:
        kp.close()
    return {tp.topic: error.__name__ for tp, error in result.items()}


def test_offset_delete(broker: BrokerProcess, topic_name: str) -> None:
    a, b = topic_name + "-a", topic_name + "-b"
    for t in (a, b):
        create_topic(broker.address, t, 1)
        produce_all(broker.address, t, [(None, b"v")] * 3, acks="all")
    admin = AdminClient({"bootstrap.servers": broker.address})
    with pytest.raises(GroupIdNotFoundError):
        _delete(broker.address, "nobody", a)

    classic = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 200}
    for group, config in (("od-classic", classic), ("od-848", {"group.protocol": "consumer"})):
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(a, 0, 2), TopicPartition(b, 0, 3)])
        (future,) = admin.alter_consumer_group_offsets([req]).values()
        future.result(20)
        member = _member(broker.address, group, a, **config)
        try:
            assert _delete(broker.address, group, a, b) == {
                a: "GroupSubscribedToTopicError", b: "NoError"}
            assert _offsets(admin, group, a, b) == {a: 2, b: -1001}
        finally:
            member.close()

    assert _delete(broker.address, "od-classic", a) == {a: "NoError"}
    assert _delete(broker.address, "od-848", a) == {a: "NoError"}
    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.address})
    assert _offsets(admin, "od-classic", a, b) == {a: -1001, b: -1001}
    assert _offsets(admin, "od-848", a, b) == {a: -1001, b: -1001}
