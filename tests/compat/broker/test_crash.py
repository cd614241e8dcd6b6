"""`kill -9` the broker while an acks=all producer is sending: after a restart every
acknowledged message is present exactly once, at its acknowledged offset, in order within
its partition."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.compat.broker.helpers import BrokerProcess, create_topic
from tests.support.procs import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(180)]

PARTITIONS = 3

# Runs in a subprocess: produce forever, print "partition offset value" per acknowledgement.
PRODUCER = r"""
import sys
from confluent_kafka import Producer
address, topic = sys.argv[1], sys.argv[2]
p = Producer({"bootstrap.servers": address, "acks": "all", "enable.idempotence": True,
              "linger.ms": 2, "message.timeout.ms": 600000, "retry.backoff.ms": 50})
def report(err, msg):
    if err is None:
        sys.stdout.write(f"{msg.partition()} {msg.offset()} {msg.value().decode()}\n")
        sys.stdout.flush()
i = 0
while True:
    try:
        p.produce(topic, key=str(i % 10).encode(), value=f"m{i}".encode(), on_delivery=report)
        i += 1
    except BufferError:
        pass
    p.poll(0.001 if i % 50 == 0 else 0)
"""


def test_acknowledged_messages_survive_kill_9(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.address, topic_name, PARTITIONS)
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, broker.address, topic_name],
                                stdout=subprocess.PIPE, text=True)
    acked: list[tuple[int, int, str]] = []

    def pump() -> None:
        assert producer.stdout is not None
        for line in producer.stdout:
            p, o, v = line.split()
            acked.append((int(p), int(o), v))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        wait_until(lambda: len(acked) >= 2000, timeout=60, what="2000 acknowledgements")
        broker.kill()
        time.sleep(0.3)  # let acknowledgements already on the wire reach the producer
    finally:
        producer.kill()
        producer.wait(timeout=10)
        reader.join(timeout=10)
    assert acked, "the producer never got an acknowledgement"

    broker.start()
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": f"v-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        highs = [consumer.get_watermark_offsets(TopicPartition(topic_name, p), timeout=10)[1]
                 for p in range(PARTITIONS)]
        consumer.assign([TopicPartition(topic_name, p, 0) for p in range(PARTITIONS)])
        stored: dict[tuple[int, int], str] = {}
        deadline = time.monotonic() + 60
        while len(stored) < sum(highs) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                stored[(msg.partition(), msg.offset())] = msg.value().decode()
    finally:
        consumer.close()
    assert len(stored) == sum(highs)

    counts = Counter(stored.values())
    for partition, offset, value in acked:
        assert stored.get((partition, offset)) == value, (partition, offset, value)
        assert counts[value] == 1, f"{value} stored {counts[value]} times"
    for p in range(PARTITIONS):
        seq = [int(v[1:]) for (q, _), v in sorted(stored.items()) if q == p]
        assert seq == sorted(seq), f"partition {p} out of order"
