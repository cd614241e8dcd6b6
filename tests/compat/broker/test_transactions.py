"""Transactions are not supported: transactional producers must fail at once with a reason
(librdkafka, kafka-python), while idempotent producers keep working."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.compat.broker.helpers import BrokerProcess, produce_all, read_topic

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

PROMPT = 5.0  # seconds; the clients' own timeouts below are 15 s


def test_librdkafka_init_transactions_fails_fast_with_reason(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.address, "transactional.id": "tx"})
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(15)
    assert time.monotonic() - started < PROMPT
    error: KafkaError = raised.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error.fatal() and not error.retriable()
    assert "transactions are not supported by this broker" in error.str()


def test_kafka_python_init_transactions_fails_fast(broker: BrokerProcess) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    producer = KafkaProducer(bootstrap_servers=broker.address, transactional_id="tx",
                             max_block_ms=15000)
    try:
        started = time.monotonic()
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
        assert time.monotonic() - started < PROMPT
    finally:
        producer.close(timeout=5)


def test_init_producer_id_with_transactional_id_is_refused(broker: BrokerProcess) -> None:
    """A client that asks InitProducerId for a transactional id without looking up a
    coordinator gets the same fatal code; without one it gets a producer id."""
    from kafka import KafkaAdminClient
    from kafka.protocol.producer import InitProducerIdRequest

    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        async def init(transactional_id: str | None) -> tuple[int, int]:
            request = InitProducerIdRequest(transactional_id=transactional_id,
                                            transaction_timeout_ms=60000, max_version=1)
            response = await admin._manager.send(request, node_id=0)
            return response.error_code, response.producer_id

        assert admin._manager.run(init, "tx") == (
            KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
        error, producer_id = admin._manager.run(init, None)
        assert error == 0 and producer_id >= 0
    finally:
        admin.close()


def test_idempotent_producers_still_work(broker: BrokerProcess, topic_name: str) -> None:
    from kafka import KafkaProducer

    produce_all(broker.address, topic_name, [(None, b"rdkafka")], **{"enable.idempotence": True})
    producer = KafkaProducer(bootstrap_servers=broker.address, enable_idempotence=True, acks="all")
    try:
        producer.send(topic_name, b"kafka-python").get(timeout=20)
    finally:
        producer.close(timeout=5)
    assert sorted(m.value() for m in read_topic(broker.address, topic_name, 2)) == [
        b"kafka-python", b"rdkafka"]
