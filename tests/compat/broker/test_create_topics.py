"""CreateTopics validation against `crossbeat broker`, compared with what Apache Kafka answers.

kafka-python's admin client is used where librdkafka would refuse the request itself
(duplicate names) and because it hands back the broker's error code and message as sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.compat.broker.helpers import BrokerProcess, produce_all

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

INVALID_REQUEST = 42


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[Any]:
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        yield client
    finally:
        client.close()


def create(admin: Any, *topics: Any) -> list[tuple[str, int, str | None]]:
    """Send one CreateTopics request; (name, error code, message) per result, in order."""
    response = admin.create_topics(list(topics), raise_errors=False)
    return [(t["name"], t["error_code"], t["error_message"]) for t in response["topics"]]


def test_same_topic_twice_in_one_request_is_invalid_and_not_created(admin: Any) -> None:
    from kafka.admin import NewTopic

    results = create(admin, NewTopic("twice", 1, 1), NewTopic("twice", 2, 1),
                     NewTopic("once", 1, 1))
    assert results == [("twice", INVALID_REQUEST, "Duplicate topic name."), ("once", 0, None)]
    assert sorted(admin.list_topics()) == ["once"]


def test_topic_names_up_to_249_characters(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.address})
    longest = "n" * 249
    admin.create_topics([NewTopic(longest, 2, 1)])[longest].result(20)
    delivered = produce_all(broker.address, longest, [(None, b"long")], acks="all")
    assert len(delivered) == 1
    with pytest.raises(KafkaException, match="TOPIC_EXCEPTION"):
        admin.create_topics([NewTopic("n" * 250, 1, 1)])["n" * 250].result(20)
    assert set(admin.list_topics(timeout=10).topics) == {longest}


def test_names_colliding_in_dot_and_underscore_are_refused(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic("orders.eu", 1, 1)])["orders.eu"].result(20)
    with pytest.raises(KafkaException, match="collides with existing topics") as refused:
        admin.create_topics([NewTopic("orders_eu", 1, 1)])["orders_eu"].result(20)
    assert refused.value.args[0].name() == "TOPIC_EXCEPTION"  # INVALID_TOPIC_EXCEPTION (17)
    # also across a restart (the table is rebuilt from the store), and when auto-created
    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.address})
    with pytest.raises(KafkaException, match="collides with existing topics"):
        admin.create_topics([NewTopic("orders_eu", 1, 1)])["orders_eu"].result(20)
    producer = Producer({"bootstrap.servers": broker.address, "message.timeout.ms": 10000})
    failures: list[Any] = []
    producer.produce("orders_eu", b"x", on_delivery=lambda err, _msg: failures.append(err))
    assert producer.flush(20) == 0
    assert [e.name() for e in failures] == ["TOPIC_EXCEPTION"]
    assert set(admin.list_topics(timeout=10).topics) == {"orders.eu"}
    # once the other is deleted the name is free
    admin.delete_topics(["orders.eu"])["orders.eu"].result(20)
    admin.create_topics([NewTopic("orders_eu", 1, 1)])["orders_eu"].result(20)


INVALID_CONFIG = 40


@pytest.mark.parametrize(("key", "value", "why"), [
    ("retention.ms", "-2", "Value must be at least -1"),
    ("retention.bytes", "-2", "Value must be at least -1"),
    ("segment.bytes", "14", "Value must be at least 1048576"),  # Kafka 4.0's minimum
    ("segment.bytes", "1048575", "Value must be at least 1048576"),
    ("segment.bytes", "3000000000", "Not a number of type INT"),
    ("segment.ms", "0", "Value must be at least 1"),
    ("min.insync.replicas", "0", "Value must be at least 1"),
    ("retention.ms", "a week", "Not a number of type LONG"),
    ("retention.bytes", "1e9", "Not a number of type LONG"),
    ("max.message.bytes", "lots", "Not a number of type INT"),
])
def test_invalid_topic_config_values(admin: Any, key: str, value: str, why: str) -> None:
    from kafka.admin import NewTopic

    ((name, code, message),) = create(admin, NewTopic("cfg", 1, 1, topic_configs={key: value}))
    assert (name, code) == ("cfg", INVALID_CONFIG)
    assert message == f"Invalid value {value} for configuration {key}: {why}"
    assert admin.list_topics() == []


def test_boundary_topic_config_values_are_accepted(admin: Any) -> None:
    from kafka.admin import NewTopic

    configs = {"retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": "1048576",
               "segment.ms": "1", "min.insync.replicas": "1", "max.message.bytes": "0"}
    assert create(admin, NewTopic("edges", 1, 1, topic_configs=configs)) == [("edges", 0, None)]


INVALID_REPLICA_ASSIGNMENT = 39


@pytest.mark.parametrize(("assignment", "message"), [
    ({0: [0], 1: [7]}, "The manual partition assignment includes broker 7, but no such broker "
                       "is registered."),
    ({0: [0, 0]}, "The manual partition assignment includes the broker 0 more than once."),
    ({0: [0], 2: [0]}, "partitions should be a consecutive 0-based integer sequence"),
    ({1: [0]}, "partitions should be a consecutive 0-based integer sequence"),
    ({0: []}, "The manual partition assignment includes an empty replica list."),
])
def test_invalid_replica_assignment(admin: Any, assignment: dict[int, list[int]],
                                    message: str) -> None:
    from kafka.admin import NewTopic

    topic = NewTopic("assigned", replica_assignments=assignment)
    assert create(admin, topic) == [("assigned", INVALID_REPLICA_ASSIGNMENT, message)]
    assert admin.list_topics() == []


def test_valid_replica_assignment_in_any_order(admin: Any) -> None:
    from kafka.admin import NewTopic

    topic = NewTopic("assigned", replica_assignments={1: [0], 0: [0], 2: [0]})
    assert create(admin, topic) == [("assigned", 0, None)]
    (described,) = admin.describe_topics(["assigned"])
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]


@pytest.mark.parametrize(("partitions", "replication", "message"), [
    (1, -1, "A manual partition assignment was specified, but numPartitions was not -1."),
    (-1, 1, "A manual partition assignment was specified, but replication factor was not -1."),
    (2, 3, "A manual partition assignment was specified, but replication factor was not -1."),
])
def test_replica_assignment_with_count_or_factor_is_invalid(
        admin: Any, partitions: int, replication: int, message: str) -> None:
    from kafka.admin import NewTopic

    topic = NewTopic("assigned", num_partitions=partitions, replication_factor=replication,
                     replica_assignments={0: [0]})
    assert create(admin, topic) == [("assigned", INVALID_REQUEST, message)]
    assert admin.list_topics() == []


@pytest.mark.parametrize("value", ["none", "GZIP", "zstd ", "brotli", ""])
def test_unknown_compression_type_is_invalid_config(admin: Any, value: str) -> None:
    from kafka.admin import NewTopic

    topic = NewTopic("packed", 1, 1, topic_configs={"compression.type": value})
    assert create(admin, topic) == [("packed", INVALID_CONFIG, (
        f"Invalid value {value} for configuration compression.type: String must be one of: "
        "uncompressed, zstd, lz4, snappy, gzip, producer"))]
    assert admin.list_topics() == []


@pytest.mark.parametrize("value", ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"])
def test_kafka_compression_types_are_accepted(admin: Any, value: str) -> None:
    from kafka.admin import NewTopic

    topic = NewTopic(f"packed-{value}", 1, 1, topic_configs={"compression.type": value})
    assert create(admin, topic) == [(f"packed-{value}", 0, None)]


def test_results_carry_what_the_topic_was_created_with(admin: Any) -> None:
    """CreateTopics v5+ (kafka-python negotiates v7): a created topic's result has its
    partition count, replication factor, every config with its value and source (1: set on
    the topic, 5: Kafka's default; stored spelling), and (v7) the id Metadata reports; validate_only answers
    the same without creating; a refused topic has -1 and no configs. Served up to v4
    before, which has none of it (Java's CreateTopicsResult.config() then fails)."""
    response = admin.create_topics(
        {"described": {"num_partitions": 3, "configs": {"retention.ms": "60000"}}}, raise_errors=False)
    (result,) = response["topics"]
    assert (result["error_code"], result["num_partitions"], result["replication_factor"]) == (0, 3, 1)
    # kafka-python gives configs by name, sources by Kafka's names
    configs = {k: (c["value"], c["config_source"], c["read_only"]) for k, c in result["configs"].items()}
    assert configs["retention.ms"] == ("60000", "DYNAMIC_TOPIC_CONFIG", False)
    assert configs["cleanup.policy"] == ("delete", "DEFAULT_CONFIG", False)
    assert configs["message.timestamp.type"] == ("CreateTime", "DEFAULT_CONFIG", False)
    metadata = admin.describe_topics(["described"])
    assert str(result["topic_id"]) == str(metadata[0]["topic_id"])

    checked = admin.create_topics({"checked": {"num_partitions": 2, "configs": {"cleanup.policy": "compact, delete"}}},
                                  validate_only=True, raise_errors=False)
    (result,) = checked["topics"]
    assert (result["error_code"], result["num_partitions"]) == (0, 2)
    policy = result["configs"]["cleanup.policy"]
    assert (policy["value"], policy["config_source"]) == ("compact,delete", "DYNAMIC_TOPIC_CONFIG")
    assert "checked" not in admin.list_topics()

    refused = admin.create_topics({"described": {"num_partitions": 1}}, raise_errors=False)
    (result,) = refused["topics"]
    assert result["error_code"] == 36  # TOPIC_ALREADY_EXISTS
    assert (result["num_partitions"], result["replication_factor"]) == (-1, -1)
    assert not result.get("configs")
