"""A topic's bounds on its records' timestamps (KIP-937), with librdkafka: a CreateTime
topic with `message.timestamp.before.max.ms` / `after.max.ms` (or 3.x's deprecated
`message.timestamp.difference.max.ms`) refuses a batch holding a record timestamped further
from the broker's clock than that, INVALID_TIMESTAMP, and stores nothing of it; a
LogAppendTime topic ignores them. These configs were refused at CreateTopics before."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.compat.broker.helpers import BrokerProcess, read_topic, watermarks

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]
HOUR_MS = 3_600_000


def create(address: str, name: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=configs)],
                                  operation_timeout=10)
    futures[name].result(timeout=20)


def produce(address: str, topic: str, timestamps: list[int]) -> list[Any]:
    """One batch of records with these timestamps (ms); each delivery's error or None."""
    producer = Producer({"bootstrap.servers": address, "linger.ms": 50, "retries": 0})
    outcomes: list[Any] = []
    for i, ts in enumerate(timestamps):
        producer.produce(topic, value=f"v{i}".encode(), timestamp=ts,
                         on_delivery=lambda err, _msg: outcomes.append(err))
    assert producer.flush(30) == 0
    return outcomes


def test_records_outside_the_bounds_are_refused_and_nothing_is_stored(broker: BrokerProcess) -> None:
    now = int(time.time() * 1000)
    create(broker.address, "bounded", {"message.timestamp.before.max.ms": str(HOUR_MS),
                                       "message.timestamp.after.max.ms": str(HOUR_MS)})
    assert produce(broker.address, "bounded", [now, now - 60_000, now + 60_000]) == [None] * 3
    for bad in (now - 2 * HOUR_MS, now + 2 * HOUR_MS):
        # one record out of range fails its whole batch, as in Kafka
        errors = produce(broker.address, "bounded", [now, bad])
        assert [e.code() for e in errors] == [KafkaError.INVALID_TIMESTAMP] * 2, errors
    assert watermarks(broker.address, "bounded") == (0, 3)
    assert [m.timestamp()[1] for m in read_topic(broker.address, "bounded", 3)] == [
        now, now - 60_000, now + 60_000]


def test_difference_bounds_both_sides_unless_one_is_set(broker: BrokerProcess) -> None:
    now = int(time.time() * 1000)
    create(broker.address, "difference", {"message.timestamp.difference.max.ms": str(HOUR_MS),
                                          "message.timestamp.after.max.ms": str(24 * HOUR_MS)})
    old = produce(broker.address, "difference", [now - 2 * HOUR_MS])
    assert [e.code() for e in old] == [KafkaError.INVALID_TIMESTAMP]
    # `after` set: the difference does not bound that side
    assert produce(broker.address, "difference", [now + 2 * HOUR_MS]) == [None]


def test_log_append_time_topics_ignore_the_bounds(broker: BrokerProcess) -> None:
    now = int(time.time() * 1000)
    create(broker.address, "appended", {"message.timestamp.type": "LogAppendTime",
                                        "message.timestamp.before.max.ms": "1000"})
    assert produce(broker.address, "appended", [now - 2 * HOUR_MS]) == [None]


def test_the_bounds_can_be_altered_and_described(broker: BrokerProcess) -> None:
    now = int(time.time() * 1000)
    create(broker.address, "altered", {})
    assert produce(broker.address, "altered", [now - 2 * HOUR_MS]) == [None]  # unbounded by default
    admin = AdminClient({"bootstrap.servers": broker.address})
    resource = ConfigResource("topic", "altered", incremental_configs=[ConfigEntry(
        "message.timestamp.before.max.ms", str(HOUR_MS), incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=20)
    assert [e.code() for e in produce(broker.address, "altered", [now - 2 * HOUR_MS])] == [
        KafkaError.INVALID_TIMESTAMP]
    described = admin.describe_configs([ConfigResource("topic", "altered")])
    (configs,) = [fut.result(timeout=20) for fut in described.values()]
    assert configs["message.timestamp.before.max.ms"].value == str(HOUR_MS)
    assert configs["message.timestamp.after.max.ms"].value == str(2**63 - 1)
