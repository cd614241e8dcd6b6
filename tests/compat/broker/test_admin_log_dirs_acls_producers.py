"""The admin APIs of log dirs, ACLs and producer states, from real clients against a real
broker: DescribeLogDirs (kafka-python's describe_log_dirs, and null topics at v1 sent
raw), DescribeAcls/CreateAcls/DeleteAcls (SECURITY_DISABLED, as from Kafka without an
authorizer, through kafka-python's and confluent-kafka's admin clients), and DescribeProducers
(kafka-python's describe_producers, after confluent-kafka's idempotent and transactional
producers)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka import TopicPartition
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import SecurityDisabledError, UnknownTopicOrPartitionError
from kafka.protocol.admin import (
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeProducersRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest

from tests.compat.broker.helpers import BrokerProcess, create_topic

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture
def kp(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        yield admin
    finally:
        admin.close()


def send(kp: KafkaAdminClient, request: Any) -> Any:
    """`request` to the broker (node 0) through kafka-python's connection manager."""
    manager = kp._manager
    return manager.run(manager.send, request, 0)


def deliver(producer: Any, topic: str, partition: int, values: list[bytes]) -> list[int]:
    """Produce `values` to one partition and flush; return their offsets."""
    offsets: list[int] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for value in values:
        producer.produce(topic, value=value, partition=partition, on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors, errors
    return offsets


def produce(address: str, topic: str, partition: int, values: list[bytes],
            **config: Any) -> list[int]:
    """Produce `values` to one partition with a new producer; return their offsets."""
    return deliver(Producer({"bootstrap.servers": address, "linger.ms": 5, **config}),
                   topic, partition, values)


def log_dir(kp: KafkaAdminClient, topics: Any = None) -> dict[str, Any]:
    """The only log dir kafka-python's describe_log_dirs reports (a dict)."""
    (described,) = kp.describe_log_dirs(topics)
    assert described["broker"] == 0
    (directory,) = described["log_dirs"]
    assert isinstance(directory, dict)
    return directory


def sizes(directory: dict[str, Any]) -> dict[str, dict[int, int]]:
    """{topic: {partition: size}} of a described log dir, checking offset lag and future."""
    out: dict[str, dict[int, int]] = {}
    for topic in directory["topics"]:
        for p in topic["partitions"]:
            assert (p["offset_lag"], p["is_future_key"]) == (0, False)
            out.setdefault(topic["name"], {})[p["partition_index"]] = p["partition_size"]
    return out


def test_advertised_versions(kp: KafkaAdminClient) -> None:
    response = send(kp, ApiVersionsRequest(client_software_name="t",
                                           client_software_version="1"))
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert {key: advertised[key] for key in (29, 30, 31, 35, 61)} == {
        29: (1, 3), 30: (1, 3), 31: (1, 3), 35: (1, 5), 61: (0, 0)}


# ---- DescribeLogDirs ------------------------------------------------------------------------

def test_describe_log_dirs(broker: BrokerProcess, kp: KafkaAdminClient, topic_name: str) -> None:
    create_topic(broker.address, topic_name, 2)
    create_topic(broker.address, f"{topic_name}-other", 1)
    before = log_dir(kp)  # every topic (kafka-python lists them by Metadata)
    assert before["error_code"] == 0
    assert before["log_dir"] == str(broker.data_dir / "streams")
    assert before["total_bytes"] > 0 and 0 < before["usable_bytes"] <= before["total_bytes"]
    assert set(sizes(before)) == {topic_name, f"{topic_name}-other"}
    assert set(sizes(before)[topic_name]) == {0, 1}

    assert produce(broker.address, topic_name, 0, [b"x" * 1000] * 20) == list(range(20))
    after = sizes(log_dir(kp, [topic_name]))
    assert set(after) == {topic_name}  # only what was asked for
    assert after[topic_name][0] >= before_size(before, topic_name, 0) + 20_000
    assert after[topic_name][1] == before_size(before, topic_name, 1)

    # partitions and topics that do not exist are left out, a topic with none at all too
    asked = {topic_name: [1, 7], "no-such-topic": [0], f"{topic_name}-other": [3]}
    assert sizes(log_dir(kp, asked)) == {topic_name: {1: after[topic_name][1]}}

    kp.delete_topics([topic_name])
    assert set(sizes(log_dir(kp))) == {f"{topic_name}-other"}
    assert sizes(log_dir(kp, {topic_name: [0]})) == {}


def before_size(directory: dict[str, Any], topic: str, partition: int) -> int:
    return sizes(directory)[topic][partition]


def test_describe_log_dirs_null_topics_and_versions(
    broker: BrokerProcess, kp: KafkaAdminClient, topic_name: str
) -> None:
    create_topic(broker.address, topic_name, 3)
    for version in (1, 3, 4, 5):
        request = DescribeLogDirsRequest(topics=None, min_version=version, max_version=version)
        response = send(kp, request)
        assert isinstance(response, DescribeLogDirsResponse)
        (result,) = response.results
        assert (result.error_code, result.log_dir) == (0, str(broker.data_dir / "streams"))
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [
            (topic_name, [0, 1, 2])]
        if version >= 4:  # v4 adds the file system's size
            assert result.total_bytes > 0 and 0 < result.usable_bytes <= result.total_bytes
        if version >= 3:
            assert response.error_code == 0


# ---- ACLs -----------------------------------------------------------------------------------

def test_acls_kafka_python(kp: KafkaAdminClient) -> None:
    topics = ResourcePatternFilter(KpResourceType.TOPIC, None, ACLResourcePatternType.ANY)
    every = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                      permission_type=ACLPermissionType.ANY, resource_pattern=topics)
    with pytest.raises(SecurityDisabledError, match="No Authorizer is configured on the broker"):
        kp.describe_acls(every)

    acl = ACL(principal="User:alice", host="*", operation=ACLOperation.READ,
              permission_type=ACLPermissionType.ALLOW,
              resource_pattern=ResourcePattern(KpResourceType.TOPIC, "orders"))
    created = kp.create_acls([acl, acl])
    assert created["succeeded"] == []
    assert created["failed"] == [SecurityDisabledError, SecurityDisabledError]

    deleted = kp.delete_acls([every])
    assert deleted == [(every, [], SecurityDisabledError)]


def test_acls_confluent(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.address})

    def code_of(future: Any) -> int:
        with pytest.raises(KafkaException) as info:
            future.result(20)
        code: int = info.value.args[0].code()
        return code

    anything: Any = None  # a null filter field (typed str in the stubs)
    every = AclBindingFilter(ResourceType.ANY, anything, ResourcePatternType.ANY, anything,
                             anything, AclOperation.ANY, AclPermissionType.ANY)
    # librdkafka drops DescribeAcls' top-level error code (rd_kafka_DescribeAclsResponse_parse
    # reads it and answers success): against Kafka without an authorizer too, the listing is
    # empty rather than an error
    assert admin.describe_acls(every, request_timeout=20).result(20) == []

    bindings = [AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:bob",
                           "*", AclOperation.WRITE, AclPermissionType.ALLOW)
                for name in ("a", "b")]
    created = admin.create_acls(bindings, request_timeout=20)
    assert [code_of(created[b]) for b in bindings] == [KafkaError.SECURITY_DISABLED] * 2

    (deleted,) = admin.delete_acls([every], request_timeout=20).values()
    assert code_of(deleted) == KafkaError.SECURITY_DISABLED
    with pytest.raises(KafkaException, match="No Authorizer is configured"):
        deleted.result(20)


# ---- DescribeProducers ----------------------------------------------------------------------

def test_describe_producers_idempotent_then_transactional(
    broker: BrokerProcess, kp: KafkaAdminClient, topic_name: str
) -> None:
    create_topic(broker.address, topic_name, 2)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    assert kp.describe_producers([tp0])[tp0].active_producers == []

    started = int(time.time() * 1000)
    produce(broker.address, topic_name, 0, [b"i%d" % i for i in range(5)],
            **{"enable.idempotence": True, "linger.ms": 0, "batch.num.messages": 2})
    produce(broker.address, topic_name, 0, [b"plain"])  # no producer id: not listed
    done = int(time.time() * 1000)
    (idempotent,) = kp.describe_producers([tp0])[tp0].active_producers
    assert idempotent.producer_id >= 0 and idempotent.producer_epoch == 0
    assert idempotent.last_sequence == 4  # five records: sequences 0-4
    assert started <= idempotent.last_timestamp <= done
    assert (idempotent.coordinator_epoch, idempotent.current_transaction_start_offset) == (-1, -1)
    assert kp.describe_producers([tp1])[tp1].active_producers == []

    tx = Producer({"bootstrap.servers": broker.address, "transactional.id": f"tx-{topic_name}",
                   "linger.ms": 5})
    tx.init_transactions(20)
    tx.begin_transaction()
    # after the 5 idempotent records and the plain one
    assert deliver(tx, topic_name, 0, [b"t0", b"t1", b"t2"]) == [6, 7, 8]

    def by_pid() -> dict[int, Any]:
        return {p.producer_id: p for p in kp.describe_producers([tp0])[tp0].active_producers}

    open_ = by_pid()
    assert idempotent.producer_id in open_ and len(open_) == 2
    (txn_pid,) = set(open_) - {idempotent.producer_id}
    assert open_[txn_pid].current_transaction_start_offset == 6
    assert open_[txn_pid].last_sequence == 2
    assert open_[idempotent.producer_id].current_transaction_start_offset == -1

    tx.commit_transaction(20)
    committed = by_pid()
    assert committed[txn_pid].current_transaction_start_offset == -1
    assert committed[txn_pid].producer_epoch == open_[txn_pid].producer_epoch
    assert committed[txn_pid].last_sequence == 2  # the marker has no sequence


def test_describe_producers_errors(
    broker: BrokerProcess, kp: KafkaAdminClient, topic_name: str
) -> None:
    create_topic(broker.address, topic_name, 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        kp.describe_producers([TopicPartition("no-such-topic", 0)], broker_id=0)
    with pytest.raises(UnknownTopicOrPartitionError):
        kp.describe_producers([TopicPartition(topic_name, 4)], broker_id=0)

    topic = DescribeProducersRequest.TopicRequest
    response = send(kp, DescribeProducersRequest(topics=[
        topic(name=topic_name, partition_indexes=[0, 4]),
        topic(name="no-such-topic", partition_indexes=[0, 1]),
    ]))
    assert [(t.name, [(p.partition_index, p.error_code, p.error_message, p.active_producers)
                      for p in t.partitions]) for t in response.topics] == [
        (topic_name, [(0, 0, None, []), (4, UNKNOWN_TOPIC_OR_PARTITION, None, [])]),
        ("no-such-topic", [
            (0, UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.", []),
            (1, UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.", []),
        ]),
    ]
