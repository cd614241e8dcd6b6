"""Topic configs altered by real admin clients take effect, are described with their source,
and survive a restart: confluent-kafka's incremental_alter_configs and alter_configs,
kafka-python's alter_configs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from tests.compat.broker.helpers import (
    BrokerProcess,
    consume_n,
    create_topic,
    new_consumer,
    produce_all,
    running_broker,
    watermarks,
)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data", "retention_check_interval_ms = 100") as proc:
        yield proc


def _set(topic: str, **configs: str) -> ConfigResource:
    return ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])


def _describe(admin: AdminClient, topic: str) -> dict[str, tuple[str, ConfigSource]]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(20)
    return {k: (e.value, ConfigSource(e.source)) for k, e in entries.items()}


def _produce_error(address: str, topic: str, value: bytes) -> str | None:
    producer = Producer({"bootstrap.servers": address, "message.max.bytes": 100_000})
    errors: list[str | None] = []
    producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(
        err.name() if err is not None else None))
    assert producer.flush(30) == 0
    return errors[0]


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alters_apply_and_persist(broker: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.address})
    create_topic(broker.address, topic_name, 1)
    produce_all(broker.address, topic_name, [(None, b"x" * 100)] * 3, acks="all")

    res = _set(topic_name, max_message_bytes="1000")
    admin.incremental_alter_configs([res], validate_only=True)[res].result(20)
    assert _describe(admin, topic_name)["max.message.bytes"][1] == ConfigSource.DEFAULT_CONFIG
    admin.incremental_alter_configs([res])[res].result(20)
    described = _describe(admin, topic_name)
    assert described["max.message.bytes"] == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert described["retention.ms"][1] == ConfigSource.DEFAULT_CONFIG
    assert _produce_error(broker.address, topic_name, b"y" * 2000) == "MSG_SIZE_TOO_LARGE"

    bad = _set(topic_name, retention_ms="-5")
    with pytest.raises(KafkaException, match="Value must be at least -1"):
        admin.incremental_alter_configs([bad])[bad].result(20)
    broker_res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="Cannot update these configs dynamically"):
        admin.incremental_alter_configs([broker_res])[broker_res].result(20)

    # retention.ms takes effect on the next retention pass: the old records go
    res = _set(topic_name, retention_ms="1")
    admin.incremental_alter_configs([res])[res].result(20)
    deadline = time.monotonic() + 20
    while watermarks(broker.address, topic_name) != (3, 3) and time.monotonic() < deadline:
        pass  # each look-up is a round trip to the broker
    assert watermarks(broker.address, topic_name) == (3, 3)

    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.address})
    described = _describe(admin, topic_name)
    assert described["max.message.bytes"] == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert described["retention.ms"] == ("1", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert _produce_error(broker.address, topic_name, b"y" * 2000) == "MSG_SIZE_TOO_LARGE"

    # the legacy alter replaces the whole set: max.message.bytes returns to its default
    legacy = ConfigResource(ConfigResource.Type.TOPIC, topic_name,
                            set_config={"retention.ms": "3600000"})
    admin.alter_configs([legacy])[legacy].result(20)
    described = _describe(admin, topic_name)
    assert described["retention.ms"] == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert described["max.message.bytes"][1] == ConfigSource.DEFAULT_CONFIG
    assert _produce_error(broker.address, topic_name, b"y" * 2000) is None


def test_kafka_python_alter_configs(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.address, topic_name, 1)
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic_name,
                                              configs={"message.timestamp.type": "LogAppendTime"})])
    finally:
        admin.close()
    produce_all(broker.address, topic_name, [(None, b"v")], acks="all")
    consumer = new_consumer(broker.address, "ts-reader")
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    (msg,) = consume_n(consumer, 1)
    consumer.close()
    assert msg.timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME
