"""A transaction open when the broker goes down (stopped or killed) is still open when it
comes back, as in Kafka: confluent-kafka's producer, which lives through the restart,
commits it, and read_committed consumers then see it. Before, every restart aborted the
open transactions and fenced their producers, so the commit failed."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from tests.compat.broker.helpers import (
    configured_broker,
    create_topic,
    new_consumer,
    stable_offsets,
)
from tests.compat.broker.relay import relay
from tests.support.procs import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]


def open_transaction_start(address: str, topic: str) -> list[int]:
    """Per producer of partition 0 (DescribeProducers), the first offset of its open
    transaction there, -1 if none."""
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KTopicPartition

    tp = KTopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=address)
    try:
        return [p.current_transaction_start_offset
                for p in admin.describe_producers([tp])[tp].active_producers]
    finally:
        admin.close()


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_transaction_open_over_a_restart_commits(tmp_path: Path, how: str) -> None:
    with relay() as front:
        broker = configured_broker(tmp_path / "data")
        front.start_broker(broker)
        try:
            create_topic(front.address, "t", 1)
            producer = Producer({"bootstrap.servers": front.address, "transactional.id": "tx",
                                 "linger.ms": 5})
            producer.init_transactions(20)
            producer.begin_transaction()
            for i in range(5):
                producer.produce("t", value=b"v%d" % i)
            assert producer.flush(20) == 0
            front.restart_broker(broker, how)
            # still open: read_committed readers are held before it, and the partition
            # names it (its index was built at the restart, not left to a first reader)
            assert open_transaction_start(front.address, "t") == [0]
            assert stable_offsets(front.address, "t") == (0, 5)
            producer.commit_transaction(60)
            assert stable_offsets(front.address, "t") == (6, 6)  # its 5 records and the marker
            consumer = new_consumer(front.address, "reader", **{"isolation.level": "read_committed"})
            consumer.assign([TopicPartition("t", 0, 0)])
            values: list[bytes] = []

            def read() -> bool:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    values.append(msg.value())
                return len(values) >= 5

            try:
                wait_until(read, what="the committed records")
            finally:
                consumer.close()
            assert values == [b"v%d" % i for i in range(5)]
            assert "PRODUCER_FENCED" not in broker.output()
        finally:
            if broker.service is not None and broker.service.proc.poll() is None:
                broker.stop()
