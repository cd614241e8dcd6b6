"""librdkafka (confluent-kafka) producers against `crossbeat broker`: acks 0/1/all, keyed
(murmur2, like Java and kafka-python), idempotent."""

from __future__ import annotations

import pytest
from kafka.partitioner.default import murmur2

from tests.compat.broker.helpers import (
    BrokerProcess,
    create_topic,
    produce_all,
    read_topic,
)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_acks_then_consume(broker: BrokerProcess, topic_name: str, acks: str) -> None:
    values = [f"acks-{acks}-{i}".encode() for i in range(200)]
    delivered = produce_all(broker.address, topic_name, [(None, v) for v in values], acks=acks)
    assert len(delivered) == len(values)
    if acks != "0":  # acks=0 reports no offsets (-1001)
        assert sorted(o for _, o, _ in delivered) == list(range(len(values)))
    got = read_topic(broker.address, topic_name, len(values))
    assert [m.value() for m in got] == values
    assert [m.offset() for m in got] == list(range(len(values)))


def test_keyed_murmur2_partitioning(broker: BrokerProcess, topic_name: str) -> None:
    partitions = 4
    create_topic(broker.address, topic_name, partitions)
    keys = [f"bucket/key-{i}".encode() for i in range(60)]
    messages = [(k, b"v-" + k) for k in keys]
    delivered = produce_all(broker.address, topic_name, messages, acks="all",
                            partitioner="murmur2_random")
    by_value = {v: p for p, _, v in delivered}
    for key in keys:
        expected = (murmur2(key) & 0x7FFFFFFF) % partitions
        assert by_value[b"v-" + key] == expected, key
    got = read_topic(broker.address, topic_name, len(keys))
    assert sorted((m.partition(), m.key()) for m in got) == sorted(
        ((murmur2(k) & 0x7FFFFFFF) % partitions, k) for k in keys)


def test_idempotent_producer(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.address, topic_name, 3)
    messages = [(f"k{i % 7}".encode(), f"idem-{i}".encode()) for i in range(500)]
    delivered = produce_all(broker.address, topic_name, messages, **{
        "enable.idempotence": True, "max.in.flight.requests.per.connection": 5,
        "linger.ms": 1, "batch.num.messages": 20})
    assert len(delivered) == len(messages)
    got = read_topic(broker.address, topic_name, len(messages))
    assert sorted(m.value() for m in got) == sorted(v for _, v in messages)
    per_key: dict[bytes, list[int]] = {}
    for m in got:
        per_key.setdefault(m.key(), []).append(int(m.value().split(b"-")[1]))
    for key, seq in per_key.items():
        assert seq == sorted(seq), f"key {key!r} out of order"
