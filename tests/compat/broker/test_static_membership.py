"""Static group membership (KIP-345, group.instance.id) with librdkafka and kafka-python.

A static member that restarts within its session timeout gets its partitions back without a
rebalance; a second consumer with an instance id already in use fences the first; an admin
can remove a static member by its instance id (LeaveGroup v3+).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from tests.compat.broker.helpers import BrokerProcess, create_topic, new_consumer

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

PARTITIONS = 4


class Tracked:
    """A librdkafka consumer subscribed to `topic` that records its rebalance callbacks."""

    def __init__(self, address: str, group: str, topic: str, instance: str | None) -> None:
        self.revoked: list[set[int]] = []
        self.errors: list[KafkaError] = []  # from poll() and error_cb (fatal errors come there)
        config: dict[str, Any] = {"session.timeout.ms": 10000, "error_cb": self.errors.append}
        if instance is not None:
            config["group.instance.id"] = instance
        self.consumer = new_consumer(address, group, **config)
        self.consumer.subscribe([topic], on_revoke=self._on_revoke)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self.revoked.append({p.partition for p in partitions})

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is not None and msg.error() is not None:
            self.errors.append(msg.error())

    def partitions(self) -> set[int]:
        return {p.partition for p in self.consumer.assignment()}


def poll_until(consumers: list[Tracked], done: Any, what: str, timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for c in consumers:
            c.poll()


def test_static_member_restart_keeps_assignment_without_rebalance(
        broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.address, topic_name, PARTITIONS)
    group = f"g-{topic_name}"
    a = Tracked(broker.address, group, topic_name, "instance-a")
    b = Tracked(broker.address, group, topic_name, "instance-b")
    restarted: Tracked | None = None
    try:
        poll_until([a, b], lambda: a.partitions() and b.partitions()
                   and a.partitions() | b.partitions() == set(range(PARTITIONS)),
                   "both static members to share the partitions")
        before_a, before_b = a.partitions(), b.partitions()
        revocations_b = len(b.revoked)
        a.consumer.close()  # a static member sends no LeaveGroup: its membership stays

        restarted = Tracked(broker.address, group, topic_name, "instance-a")
        poll_until([restarted, b], lambda: bool(restarted and restarted.partitions()),
                   "the restarted static member's assignment")
        assert restarted.partitions() == before_a
        # b was never asked to give up its partitions: no rebalance happened
        assert len(b.revoked) == revocations_b, b.revoked
        assert b.partitions() == before_b
        assert not restarted.errors and not b.errors, (restarted.errors, b.errors)
    finally:
        for c in (restarted, b):
            if c is not None:
                c.consumer.close()


def test_second_consumer_with_same_instance_id_fences_the_first(
        broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.address, topic_name, PARTITIONS)
    group = f"g-{topic_name}"
    first = Tracked(broker.address, group, topic_name, "shared")
    second: Tracked | None = None
    try:
        poll_until([first], lambda: first.partitions() == set(range(PARTITIONS)),
                   "the first member's assignment")
        second = Tracked(broker.address, group, topic_name, "shared")
        # librdkafka makes FENCED_INSTANCE_ID a fatal error, reported as _FATAL from poll()
        poll_until([first, second], lambda: any(e.code() == KafkaError._FATAL for e in first.errors),
                   "the first member to be fenced")
        fatal = next(e for e in first.errors if e.code() == KafkaError._FATAL)
        assert "Static consumer fenced" in fatal.str(), fatal
        # the replacement took over the partitions and keeps them: no ping-pong
        poll_until([second], lambda: bool(second and second.partitions() == set(range(PARTITIONS))),
                   "the replacement's assignment")
        deadline = time.monotonic() + 2  # a few heartbeat intervals (200 ms)
        while time.monotonic() < deadline:
            second.poll()
        assert second.partitions() == set(range(PARTITIONS))
        assert not second.revoked and not second.errors, (second.revoked, second.errors)
    finally:
        for c in (first, second):
            if c is not None:
                c.consumer.close()


def test_kafka_python_commit_of_replaced_member_is_fenced(
        broker: BrokerProcess, topic_name: str) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import FencedInstanceIdError
    from kafka.structs import OffsetAndMetadata

    create_topic(broker.address, topic_name, PARTITIONS)
    group = f"g-{topic_name}"
    old = KafkaConsumer(bootstrap_servers=broker.address, group_id=group,
                        group_instance_id="kp", enable_auto_commit=False,
                        session_timeout_ms=10000, heartbeat_interval_ms=200)
    replacement: Tracked | None = None
    try:
        old.subscribe([topic_name])
        deadline = time.monotonic() + 40
        while len(old.assignment()) < PARTITIONS:
            assert time.monotonic() < deadline, "kafka-python never got its partitions"
            # Long polls: kafka-python 3.0.12 loses a join whose SyncGroup answer arrives
            # after the poll that sent it timed out (the member stays unassigned, about 1
            # run in 12 with 50 ms polls, while the broker answered in time).
            old.poll(timeout_ms=1000)
        replacement = Tracked(broker.address, group, topic_name, "kp")
        poll_until([replacement],
                   lambda: bool(replacement and replacement.partitions() == set(range(PARTITIONS))),
                   "the replacement's assignment")
        with pytest.raises(FencedInstanceIdError):
            old.commit({TopicPartition(topic_name, 0): OffsetAndMetadata(0, "", -1)})
    finally:
        old.close()
        if replacement is not None:
            replacement.consumer.close()


def test_admin_removes_static_member_by_instance_id(broker: BrokerProcess, topic_name: str) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove
    from kafka.errors import NoError, UnknownMemberIdError

    create_topic(broker.address, topic_name, PARTITIONS)
    group = f"g-{topic_name}"
    a = Tracked(broker.address, group, topic_name, "instance-a")
    b = Tracked(broker.address, group, topic_name, "instance-b")
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        poll_until([a, b], lambda: a.partitions() and b.partitions()
                   and a.partitions() | b.partitions() == set(range(PARTITIONS)),
                   "both static members to share the partitions")
        a.consumer.close()  # a static member leaves nothing behind: an admin must remove it
        revocations_b = len(b.revoked)
        gone, unknown = (MemberToRemove(group_instance_id="instance-a"),
                         MemberToRemove(group_instance_id="instance-z"))
        result = admin.remove_group_members(group, [gone, unknown])
        # kafka-python keys each answer by its member id, else its instance id
        assert result == {"instance-a": NoError, "instance-z": UnknownMemberIdError}
        # the removal rebalances the group: b is asked to rejoin, and then owns everything
        poll_until([b], lambda: len(b.revoked) > revocations_b
                   and b.partitions() == set(range(PARTITIONS)),
                   "b to take over every partition")
        confluent_admin = AdminClient({"bootstrap.servers": broker.address})
        described = confluent_admin.describe_consumer_groups([group])[group].result(20)
        assert [m.group_instance_id for m in described.members] == ["instance-b"]
    finally:
        admin.close()
        b.consumer.close()
