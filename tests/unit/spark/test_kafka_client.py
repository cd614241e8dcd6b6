"""The Kafka source's reader tells a deleted topic from an unreachable broker: librdkafka
answers "unknown topic/partition" locally in both cases, and taking a broker restart for
a deletion skipped the records in flight (replicas lost; with failOnDataLoss the query
failed with a false DataLossError)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from crossbeat.spark.kafka_client import SourceError, _gap
from tests.compat.broker.helpers import create_topic, produce_all
from tests.compat.broker.relay import relayed_broker

pytestmark = [pytest.mark.timeout(120)]


def test_an_unreachable_broker_is_not_a_deleted_topic(tmp_path: Path) -> None:
    with relayed_broker(tmp_path / "data") as (front, broker):
        create_topic(front.address, "kept", 1)
        create_topic(front.address, "dropped", 1)
        produce_all(front.address, "kept", [(None, b"v%d" % i) for i in range(5)])
        produce_all(front.address, "dropped", [(None, b"v%d" % i) for i in range(5)])
        c = Consumer({"bootstrap.servers": front.address, "group.id": "gap-check",
                      "socket.timeout.ms": 2000})
        assert _gap(c, "kept", 0, 0, 5, 0.0, 1.0) == (None, 0)
        admin = AdminClient({"bootstrap.servers": front.address})
        admin.delete_topics(["dropped"])["dropped"].result(20)
        lost, resume = _gap(c, "dropped", 0, 0, 5, 0.0, 1.0)
        assert lost is not None and "topic deleted" in lost and resume is None
        broker.stop()
        front.drop_connections()
        with pytest.raises((SourceError, KafkaException)) as raised:
            _gap(c, "kept", 0, 0, 5, 0.0, 1.0)
        assert "topic deleted" not in str(raised.value)
        c.close()
