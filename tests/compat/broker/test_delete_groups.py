"""DeleteGroups (42) against `crossbeat broker`: librdkafka's AdminClient and kafka-python's.

librdkafka's delete_consumer_groups is run in a child process: against a broker that does
not offer DeleteGroups it aborts the whole process at exit, which must show up as a failed
test, not as a dead test run.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import OFFSET_INVALID, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.compat.broker.helpers import (
    BrokerProcess,
    assigned_member,
    consume_commit_and_leave,
    consume_n,
    new_consumer,
    produce_all,
)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

_DELETE_SCRIPT = """
import json, sys
from confluent_kafka.admin import AdminClient
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
out = {}
for group, future in admin.delete_consumer_groups(sys.argv[2:], request_timeout=10).items():
    try:
        future.result(20)
        out[group] = "OK"
    except Exception as exc:
        out[group] = exc.args[0].name()
print(json.dumps(out))
"""


def delete_with_librdkafka(address: str, groups: list[str]) -> dict[str, str]:
    """Delete `groups` with confluent-kafka in a child process: group -> 'OK' or error name."""
    done = subprocess.run([sys.executable, "-c", _DELETE_SCRIPT, address, *groups],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    result: dict[str, str] = json.loads(done.stdout)
    return result


def committed_offset(address: str, group: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": address})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    offsets = admin.list_consumer_group_offsets([request])[group].result(20)
    offset: int = offsets.topic_partitions[0].offset
    return offset


def listed_groups(address: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": address})
    return {g.group_id for g in admin.list_consumer_groups().result(20).valid}


def test_delete_groups_with_librdkafka(broker: BrokerProcess, topic_name: str) -> None:
    produce_all(broker.address, topic_name, [(None, b"m0"), (None, b"m1")], acks="all")
    done, live = f"done-{topic_name}", f"live-{topic_name}"
    consume_commit_and_leave(broker.address, done, topic_name, 2)
    assert committed_offset(broker.address, done, topic_name) == 2

    member = assigned_member(broker.address, live, topic_name)
    try:
        results = delete_with_librdkafka(broker.address, [done, live, f"never-{topic_name}"])
        assert results == {done: "OK", live: "NON_EMPTY_GROUP",
                           f"never-{topic_name}": "GROUP_ID_NOT_FOUND"}
        assert member.assignment(), "a refused delete must leave the member in its group"
    finally:
        member.close()

    assert committed_offset(broker.address, done, topic_name) == OFFSET_INVALID
    assert done not in listed_groups(broker.address)
    # the removal is durable: a restarted broker does not bring the offsets back
    broker.stop()
    broker.start()
    assert committed_offset(broker.address, done, topic_name) == OFFSET_INVALID
    assert done not in listed_groups(broker.address)
    # a second delete finds nothing
    assert delete_with_librdkafka(broker.address, [done]) == {done: "GROUP_ID_NOT_FOUND"}


def test_delete_groups_with_kafka_python(broker: BrokerProcess, topic_name: str) -> None:
    from kafka import KafkaAdminClient

    produce_all(broker.address, topic_name, [(None, b"m0")], acks="all")
    group = f"kp-{topic_name}"
    consumer = new_consumer(broker.address, group)
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    assert len(consume_n(consumer, 1)) == 1
    consumer.commit(asynchronous=False)
    consumer.close()

    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        # kafka-python picks the highest version we offer (v2, a flexible one)
        assert admin.delete_groups([group, group, ""], group_coordinator_id=0) == {
            group: "OK", "": "InvalidGroupIdError"}
    finally:
        admin.close()
    assert committed_offset(broker.address, group, topic_name) == OFFSET_INVALID
