"""kafka-python (idempotent by default), aiokafka and kcat against `crossbeat broker`."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest

from tests.compat.broker.helpers import BrokerProcess, read_topic

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def test_kafka_python_producer_and_consumer(broker: BrokerProcess, topic_name: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.address, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic_name, key=f"k{i % 3}".encode(), value=f"kp-{i}".encode())
                   for i in range(100)]
        producer.flush(timeout=30)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert sorted(offsets) == list(range(100))

    consumer = KafkaConsumer(topic_name, bootstrap_servers=broker.address,
                             group_id=f"g-{topic_name}", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=500)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 100 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in batch)
        consumer.commit()
        committed = sum(consumer.committed(tp) or 0 for tp in consumer.assignment())
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"kp-{i}".encode() for i in range(100))
    assert committed == 100


def test_aiokafka_producer_and_consumer(broker: BrokerProcess, topic_name: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.address, acks="all")
        await producer.start()
        try:
            for i in range(50):
                await producer.send(topic_name, f"aio-{i}".encode(), key=b"k")
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic_name, bootstrap_servers=broker.address,
                                    group_id=f"g-{topic_name}", auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < 50 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    got.extend(r.value for r in records if r.value is not None)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert got == [f"aio-{i}".encode() for i in range(50)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt-get install kcat)")
def test_kcat_produce_and_consume(broker: BrokerProcess, topic_name: str) -> None:
    kcat = shutil.which("kcat")
    assert kcat is not None
    lines = [f"kcat-{i}" for i in range(30)]
    subprocess.run([kcat, "-b", broker.address, "-P", "-t", topic_name, "-X", "acks=all"],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=30)
    out = subprocess.run([kcat, "-b", broker.address, "-C", "-t", topic_name, "-o", "beginning",
                          "-e", "-q"], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.splitlines() == lines
    meta = subprocess.run([kcat, "-b", broker.address, "-L", "-t", topic_name],
                          capture_output=True, text=True, check=True, timeout=30)
    assert f'topic "{topic_name}" with 1 partitions' in meta.stdout
    assert [m.value().decode() for m in read_topic(broker.address, topic_name, 30)] == lines
