"""Kafka's producer.id.expiration.ms and transactional.id.expiration.ms, with real clients
against a broker configured to expire within a second: an idle idempotent producer's state
is dropped and librdkafka carries on (no message lost or doubled); a finished transactional
id disappears from ListTransactions, for good (across a restart), and starts afresh with a
new producer id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.compat.broker.helpers import create_topic, read_topic, running_broker
from tests.support.procs import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

FAST_EXPIRY = """\
producer_id_expiration_ms = 300
producer_id_expiration_check_interval_ms = 100
transactional_id_expiration_ms = 3000
transactional_id_cleanup_interval_ms = 100"""  # 3 s: room for a transaction from its init


def send(producer: Any, topic: str, values: list[bytes]) -> None:
    errors: list[Any] = []
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(20) == 0
    assert errors == [None] * len(values)


def test_an_idle_idempotent_producer_is_forgotten_and_goes_on(tmp_path: Path) -> None:
    with running_broker(tmp_path / "b", FAST_EXPIRY) as broker:
        create_topic(broker.address, "idem", 1)
        producer = Producer({"bootstrap.servers": broker.address, "enable.idempotence": True,
                             "linger.ms": 5})
        send(producer, "idem", [b"a", b"b"])
        wait_until(lambda: "dropped the state of 1 idle producers" in broker.output(),
                   what="the idle producer's state dropped")
        send(producer, "idem", [b"c", b"d"])  # past sequence 0: taken up anew, as in Kafka
        values = [m.value() for m in read_topic(broker.address, "idem", 4)]
        assert values == [b"a", b"b", b"c", b"d"]


def test_a_finished_transactional_id_expires(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError

    def listed(address: str) -> set[str]:
        admin = KafkaAdminClient(bootstrap_servers=address)
        try:
            (rows,) = admin.list_transactions().values()
            return {r.transactional_id for r in rows}
        finally:
            admin.close()

    with running_broker(tmp_path / "b", FAST_EXPIRY) as broker:
        create_topic(broker.address, "tx", 1)
        first = Producer({"bootstrap.servers": broker.address, "transactional.id": "tx-old"})
        first.init_transactions(20)
        producer = Producer({"bootstrap.servers": broker.address, "transactional.id": "tx-old"})
        producer.init_transactions(20)  # fences the first: epoch 1
        producer.begin_transaction()
        send(producer, "tx", [b"committed"])
        producer.commit_transaction(20)
        wait_until(lambda: "tx-old" not in listed(broker.address), what="tx-old expired")
        admin = KafkaAdminClient(bootstrap_servers=broker.address)
        try:
            with pytest.raises(TransactionalIdNotFoundError):
                admin.describe_transactions(["tx-old"])
        finally:
            admin.close()
        broker.stop()
        broker.start()  # the removal was durable
        assert "tx-old" not in listed(broker.address)
        again = Producer({"bootstrap.servers": broker.address, "transactional.id": "tx-old"})
        again.init_transactions(20)
        assert _describe_epoch(broker.address, "tx-old") == 0  # afresh, not epoch 2
        assert [m.value() for m in read_topic(broker.address, "tx", 1)] == [b"committed"]


def _describe_epoch(address: str, tid: str) -> int:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=address)
    try:
        return int(admin.describe_transactions([tid])[tid].producer_epoch)
    finally:
        admin.close()
