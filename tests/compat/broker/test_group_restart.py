"""A classic consumer group outlives a broker restart, as with Kafka's coordinator, which
loads its group metadata records: the members carry on with their member ids, generation
and assignment (no rebalance), so an exactly-once application's `send_offsets_to_transaction`
(TxnOffsetCommit with its member id and generation) is accepted after the restart. Before,
the group came back empty and that commit failed (kafka-python: CommitFailedError,
UNKNOWN_MEMBER_ID): the transaction had to abort and every member rejoin.

kafka-python drives it: librdkafka 2.16's producer never sends its TxnOffsetCommit after
its coordinator restarted (with or without this), and send_offsets_to_transaction hangs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.compat.broker.helpers import create_topic
from tests.compat.broker.relay import relayed_broker
from tests.support.procs import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]


def describe(address: str, group: str) -> tuple[str, list[str]]:
    """(state, member ids) of `group`, from DescribeGroups (a member that rejoined after
    UNKNOWN_MEMBER_ID would have a new id)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=address)
    try:
        found = admin.describe_groups([group])[group]
        return found["group_state"], sorted(m["member_id"] for m in found["members"])
    finally:
        admin.close()


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_an_exactly_once_loop_carries_on_over_a_broker_restart(tmp_path: Path, how: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    with relayed_broker(tmp_path / "data") as (front, broker):
        create_topic(front.address, "in", 1)
        create_topic(front.address, "out", 1)
        feed = KafkaProducer(bootstrap_servers=front.address)
        for i in range(10):
            feed.send("in", b"%d" % i)
        feed.flush()
        feed.close()
        consumer = KafkaConsumer("in", bootstrap_servers=front.address, group_id="eos",
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        producer = KafkaProducer(bootstrap_servers=front.address, transactional_id="eos-app")
        producer.init_transactions()
        tp = TopicPartition("in", 0)

        def process(n: int) -> Any:
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while len(got) < n and time.monotonic() < deadline:
                for records in consumer.poll(500, max_records=n - len(got)).values():
                    got.extend(records)
            assert len(got) == n
            producer.begin_transaction()
            for record in got:
                producer.send("out", record.value)
            metadata = consumer.group_metadata()
            producer.send_offsets_to_transaction({tp: OffsetAndMetadata(consumer.position(tp), "", -1)},
                                                 metadata)
            producer.commit_transaction()
            return metadata

        before = process(5)
        state, members = describe(front.address, "eos")
        assert state == "Stable" and members == [before.member_id]

        front.restart_broker(broker, how)

        # the same member, generation and assignment: no rebalance
        assert describe(front.address, "eos") == ("Stable", members)
        after = process(5)  # before: CommitFailedError (UNKNOWN_MEMBER_ID)
        assert (after.member_id, after.generation_id) == (before.member_id, before.generation_id)
        assert consumer.committed(tp) == 10
        consumer.close()
        producer.close()
        # a member that left is gone for good, and so is the kept state
        wait_until(lambda: describe(front.address, "eos")[0] == "Empty", what="the group empty")
        broker.stop()
        front.start_broker(broker)
        assert describe(front.address, "eos") == ("Empty", [])


def test_a_consumer_protocol_member_keeps_its_partitions_over_a_broker_restart(tmp_path: Path) -> None:
    """A KIP-848 group (group.protocol=consumer) is kept too: after the restart the member's
    heartbeats (its id and epoch) are recognised and it keeps its partitions, with no
    revocation; its commits with its epoch are accepted. Before, the restarted broker
    answered UNKNOWN_MEMBER_ID: the member lost its partitions and joined again."""
    from confluent_kafka import Consumer, Producer

    with relayed_broker(tmp_path / "data") as (front, broker):
        create_topic(front.address, "kip848", 2)
        feed = Producer({"bootstrap.servers": front.address})
        for i in range(4):
            feed.produce("kip848", value=b"%d" % i, partition=i % 2)
        assert feed.flush(20) == 0
        events: list[str] = []
        consumer = Consumer({"bootstrap.servers": front.address, "group.id": "k848",
                             "group.protocol": "consumer", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe(["kip848"], on_assign=lambda c, ps: events.append("assign"),
                           on_revoke=lambda c, ps: events.append("revoke"),
                           on_lost=lambda c, ps: events.append("lost"))

        def read(n: int) -> None:
            got = 0
            deadline = time.monotonic() + 30
            while got < n and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    got += 1
                    consumer.commit(msg, asynchronous=False)
            assert got == n

        read(4)
        assert events == ["assign"] and len(consumer.assignment()) == 2
        front.restart_broker(broker)
        for i in range(4):
            feed.produce("kip848", value=b"again %d" % i, partition=i % 2)
        assert feed.flush(20) == 0
        read(4)  # commits with its member epoch, accepted
        assert events == ["assign"], events  # no revocation, no loss, no re-assignment
        consumer.close()
