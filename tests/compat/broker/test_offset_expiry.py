"""Offset expiry (offsets.retention, KIP-211) on a real `crossbeat broker` with a retention
of about a second and a 100 ms check, seen through confluent-kafka and kafka-python.

Each wait is a bounded poll of what the clients see; where expiry must not come early,
the time it took is checked against the retention (a lower bound holds however slow the
machine is)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.compat.broker.helpers import (
    BrokerProcess,
    assigned_member,
    configured_broker,
    consume_commit_and_leave,
    consume_n,
    create_topic,
    produce_all,
    running_broker,
)
from tests.support.procs import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

RETENTION_MS = 1000


def expiring_broker(tmp_path: Path, retention_ms: int = RETENTION_MS) -> BrokerProcess:
    return configured_broker(tmp_path / "data", expiry_settings(retention_ms))


def expiry_settings(retention_ms: int = RETENTION_MS) -> str:
    return f"offsets_retention_ms = {retention_ms}\noffsets_retention_check_interval_ms = 100"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data", expiry_settings()) as proc:
        yield proc


def listed(address: str) -> dict[str, ConsumerGroupState]:
    admin = AdminClient({"bootstrap.servers": address})
    return {g.group_id: g.state for g in admin.list_consumer_groups().result(20).valid}


def committed(address: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    """The group's committed offset per partition (OFFSET_INVALID for none)."""
    admin = AdminClient({"bootstrap.servers": address})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p)
                                                   for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(20)
    return [tp.offset for tp in sorted(result.topic_partitions, key=lambda tp: tp.partition)]


def described_state(address: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": address})
    return admin.describe_consumer_groups([group])[group].result(20).state


def test_empty_group_offsets_expire_and_the_group_ends(broker: BrokerProcess,
                                                       topic_name: str) -> None:
    produce_all(broker.address, topic_name, [(None, b"m")], acks="all")
    group = f"done-{topic_name}"
    before = time.monotonic()
    consume_commit_and_leave(broker.address, group, topic_name, 1)
    wait_until(lambda: group not in listed(broker.address), what="the Empty group is gone")
    gone = time.monotonic()  # when it first held, within a poll
    assert gone - before >= RETENTION_MS / 1000, "expired before the retention passed"
    assert committed(broker.address, group, topic_name) == [OFFSET_INVALID]
    assert described_state(broker.address, group) == ConsumerGroupState.DEAD


def test_stable_group_keeps_its_offsets(broker: BrokerProcess, topic_name: str) -> None:
    produce_all(broker.address, topic_name, [(None, b"m")], acks="all")
    live, witness = f"live-{topic_name}", f"witness-{topic_name}"
    member = assigned_member(broker.address, live, topic_name)
    try:
        assert len(consume_n(member, 1)) == 1
        member.commit(asynchronous=False)
        # a group emptied after that commit: once it is gone, so would the live group's
        # offsets be, were they counted from their commit
        consume_commit_and_leave(broker.address, witness, topic_name, 1)
        wait_until(lambda: witness not in listed(broker.address), what="the witness group is gone")
        assert listed(broker.address).get(live) == ConsumerGroupState.STABLE
        assert committed(broker.address, live, topic_name) == [1]
    finally:
        member.close()
    # Empty now: its offsets go too
    wait_until(lambda: live not in listed(broker.address), what="the emptied group is gone")
    assert committed(broker.address, live, topic_name) == [OFFSET_INVALID]


def test_committing_again_restarts_the_clock(broker: BrokerProcess, topic_name: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.structs import OffsetAndMetadata

    create_topic(broker.address, topic_name, 2)
    produce_all(broker.address, topic_name, [(None, b"m")], acks="all")
    group = f"g-{topic_name}"
    consume_commit_and_leave(broker.address, group, topic_name, 1)  # Empty, emptied just now
    p0, p1 = KafkaTopicPartition(topic_name, 0), KafkaTopicPartition(topic_name, 1)
    standalone = KafkaConsumer(bootstrap_servers=broker.address, group_id=group,
                               enable_auto_commit=False)
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        standalone.assign([p0, p1])
        before = time.monotonic()
        standalone.commit({p0: OffsetAndMetadata(5, "", -1), p1: OffsetAndMetadata(6, "", -1)})

        def recommit_p0_until_p1_expired() -> bool:
            offsets = admin.list_group_offsets(group)[group]
            # p0 was committed again a poll ago, far less than the retention: still there
            assert p0 in offsets, "p0 expired although it was just committed again"
            if p1 not in offsets:
                return True
            # a simple (generation -1) commit of p0 only, over and over: p0 never ages
            standalone.commit({p0: OffsetAndMetadata(7, "", -1)})
            return False

        wait_until(recommit_p0_until_p1_expired, what="p1's offset expired")

        gone = time.monotonic()  # when it first held, within a poll
        assert gone - before >= RETENTION_MS / 1000, "expired before the retention passed"
        kept = admin.list_group_offsets(group)[group]
        assert list(kept) == [p0] and kept[p0].offset == 7
        assert group in listed(broker.address)
        # left alone, p0 expires as well and the group with it
        wait_until(lambda: group not in listed(broker.address), what="the group is gone")
        assert admin.list_group_offsets(group)[group] == {}
    finally:
        standalone.close()
        admin.close()


def test_expiry_survives_a_restart(tmp_path: Path, topic_name: str) -> None:
    # long enough that an offset counted from its commit would be gone soon after a restart
    retention_s = 4.0
    broker = expiring_broker(tmp_path, int(retention_s * 1000))
    broker.start()
    try:
        produce_all(broker.address, topic_name, [(None, b"m")], acks="all")
        done, live = f"done-{topic_name}", f"live-{topic_name}"
        consume_commit_and_leave(broker.address, done, topic_name, 1)
        member = assigned_member(broker.address, live, topic_name)
        assert len(consume_n(member, 1)) == 1
        member.commit(asynchronous=False)
        wait_until(lambda: done not in listed(broker.address), what="the Empty group is gone")
        assert listed(broker.address).get(live) == ConsumerGroupState.STABLE
        broker.kill()  # its member never leaves: the log says the group has members
        member.close()

        restarted = time.monotonic()
        broker.start()
        # the expired group stays gone, its offsets too
        assert done not in listed(broker.address)
        assert committed(broker.address, done, topic_name) == [OFFSET_INVALID]
        # the live group lost its member with the broker: Empty from the restart on, so its
        # offsets outlive the restart by the retention, and no longer
        assert committed(broker.address, live, topic_name) == [1]
        wait_until(lambda: live not in listed(broker.address), what="the orphaned group is gone")
        gone = time.monotonic()  # when it first held, within a poll
        assert gone - restarted >= retention_s, "expired before the retention passed"
        assert committed(broker.address, live, topic_name) == [OFFSET_INVALID]
        broker.stop()
        broker.start()
        assert committed(broker.address, live, topic_name) == [OFFSET_INVALID]
    finally:
        if broker.service is not None and broker.service.proc.poll() is None:
            broker.stop()
