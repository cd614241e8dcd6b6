"""What tools ask: topics (create, list, describe configs, delete), groups (list, describe),
ListOffsets by time, with confluent-kafka's AdminClient and Consumer."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.compat.broker.helpers import BrokerProcess, consume_n, new_consumer, produce_all

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def test_topic_admin(broker: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.address})
    new = NewTopic(topic_name, num_partitions=2, replication_factor=1,
                   config={"retention.ms": "3600000", "message.timestamp.type": "LogAppendTime"})
    admin.create_topics([new])[topic_name].result(20)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(20)
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        admin.create_topics([NewTopic(topic_name + "x", 1, 3)])[topic_name + "x"].result(20)

    meta = admin.list_topics(timeout=10)
    assert len(meta.topics[topic_name].partitions) == 2

    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin.describe_configs([res])[res].result(20)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"

    before = int(time.time() * 1000)
    delivered = produce_all(broker.address, topic_name, [(b"k", b"v")], acks="all")
    consumer = new_consumer(broker.address, "admin-reader")
    consumer.assign([TopicPartition(topic_name, delivered[0][0], 0)])
    (msg,) = consume_n(consumer, 1)
    consumer.close()
    assert msg.timestamp()[1] >= before  # LogAppendTime: the broker's clock

    admin.delete_topics([topic_name])[topic_name].result(20)
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_groups_and_offsets_for_times(broker: BrokerProcess, topic_name: str) -> None:
    messages = [(None, f"m{i}".encode()) for i in range(20)]
    produce_all(broker.address, topic_name, messages[:10], acks="all")
    time.sleep(0.05)  # a timestamp boundary between the two halves
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce_all(broker.address, topic_name, messages[10:], acks="all")

    group = f"g-{topic_name}"
    consumer = new_consumer(broker.address, group)
    consumer.subscribe([topic_name])
    assert len(consume_n(consumer, 20)) == 20
    consumer.commit(asynchronous=False)

    found = consumer.offsets_for_times([TopicPartition(topic_name, 0, middle)], timeout=10)
    assert found[0].offset == 10
    low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
    assert (low, high) == (0, 20)

    admin = AdminClient({"bootstrap.servers": broker.address})
    listed = admin.list_consumer_groups().result(20)
    assert group in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(20)
    assert str(described.state).endswith("STABLE") and len(described.members) == 1
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, 0)])])[group].result(20)
    assert offsets.topic_partitions[0].offset == 20
    consumer.close()
