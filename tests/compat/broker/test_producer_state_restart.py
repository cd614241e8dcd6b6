"""An idempotent producer's state on a partition outlives a broker restart (Kafka's producer
state snapshots): its retry of a batch already written is answered as the duplicate it is,
with the batch's offset, however many batches of other producers came after it. Before,
the state was rebuilt from the last 256 batch headers only: a producer not among them was
unknown (UNKNOWN_PRODUCER_ID), so librdkafka failed fatally or stored the batch twice.

Also: producer ids start at 0 on a fresh broker whose first topic came before its first
InitProducerId (they came from the clock, with an error logged), and a deleted topic's
snapshots go with it."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.compat.broker.helpers import (
    configured_broker,
    create_topic,
    produce_all,
    read_topic,
    running_broker,
    watermarks,
)
from tests.compat.broker.relay import bound_address, relay
from tests.support.procs import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

UNKNOWN_PRODUCER_ID = 59
A, B = 5000, 5001  # producer ids (the broker takes any id an idempotent batch names)


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the broker")
        buf += chunk
    return bytes(buf)


def batch(value: bytes, pid: int, seq: int, epoch: int = 0) -> bytes:
    """An idempotent producer's batch of one record, timestamped now."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(b.build())


def produce(sock: socket.socket, topic: str, records: bytes) -> tuple[int, int]:
    """(error code, base offset) of one acks=all Produce of `records` to partition 0."""
    req = ProduceRequest[8]
    t = req.TopicProduceData
    request = req(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[t(
        name=topic, partition_data=[t.PartitionProduceData(index=0, records=records)])])
    request.with_header(correlation_id=1, client_id="restart-test")
    sock.sendall(bytes(request.encode(header=True, framed=True)))
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    resp = ProduceResponse.decode(recv_exact(sock, size), version=8, header=True)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_producer_behind_many_batches_is_known_after_a_restart(
    tmp_path: Path, how: str,
) -> None:
    with running_broker(tmp_path / "data") as broker:
        create_topic(broker.address, "t", 1)
        with connect(broker.address) as sock:
            for seq in range(10):
                assert produce(sock, "t", batch(b"A%d" % seq, A, seq)) == (0, seq)
            for seq in range(300):  # more than the 256 headers a restart read back
                assert produce(sock, "t", batch(b"B%d" % seq, B, seq)) == (0, 10 + seq)
        if how == "stop":
            broker.stop()
        else:
            broker.kill()
        broker.start()
        with connect(broker.address) as sock:
            # the retry of A's last batch: its offset, not written again
            assert produce(sock, "t", batch(b"A9", A, 9)) == (0, 9)
            assert produce(sock, "t", batch(b"A10", A, 10)) == (0, 310)
            # starting over at 0 under the same epoch is not a new producer
            code, _ = produce(sock, "t", batch(b"A0 again", A, 0))
            assert code not in (0, UNKNOWN_PRODUCER_ID)
            assert produce(sock, "t", batch(b"B299", B, 299)) == (0, 309)
        assert watermarks(broker.address, "t") == (0, 311)
        assert "Traceback" not in broker.output()


def test_librdkafka_retry_of_a_batch_whose_answer_was_lost_over_a_kill_9(tmp_path: Path) -> None:
    """The whole story with librdkafka: its batch is written but the answer lost, 300 batches
    of another producer follow, the broker is killed and comes back; the producer sends the
    batch again and carries on. It is stored once, and no delivery fails."""
    with relay() as front:
        broker = configured_broker(tmp_path / "data")
        front.start_broker(broker)
        try:
            create_topic(front.address, "t", 1)
            errors: list[Any] = []

            def report(err: Any, _msg: Any) -> None:
                errors.append(err)

            producer = Producer({"bootstrap.servers": front.address, "enable.idempotence": True,
                                 "linger.ms": 0, "message.timeout.ms": 120000})
            for i in range(5):
                producer.produce("t", value=b"A%d" % i, on_delivery=report)
                assert producer.flush(20) == 0
            front.hold_answers()
            producer.produce("t", value=b"A5", on_delivery=report)
            producer.poll(0)
            wait_until(lambda: watermarks(front.address, "t")[1] == 6, what="A5 written")
            with connect(bound_address(broker)) as sock:
                for seq in range(300):
                    assert produce(sock, "t", batch(b"B%d" % seq, B, seq))[0] == 0
            front.restart_broker(broker, "kill")
            assert producer.flush(60) == 0
            for i in (6, 7):
                producer.produce("t", value=b"A%d" % i, on_delivery=report)
                assert producer.flush(30) == 0
            assert errors == [None] * 8
            values = [m.value() for m in read_topic(front.address, "t", 308)]
            assert [v for v in values if v.startswith(b"A")] == [b"A%d" % i for i in range(8)]
            assert len(values) == 308
        finally:
            if broker.service is not None and broker.service.proc.poll() is None:
                broker.stop()


def test_a_deleted_topics_producer_snapshots_go_with_it(tmp_path: Path) -> None:
    snapshots = tmp_path / "data" / "producer_snapshots"
    idempotent = {"enable.idempotence": True}
    with running_broker(tmp_path / "data") as broker:
        create_topic(broker.address, "gone", 2)
        produce_all(broker.address, "gone", [(b"k%d" % i, b"old") for i in range(8)], **idempotent)
        broker.stop()  # a clean shutdown saves every partition's producers
        assert sorted(p.name for p in snapshots.iterdir()) == [
            "gone-0.snapshot", "gone-1.snapshot"]
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.address})
        admin.delete_topics(["gone"], operation_timeout=10)["gone"].result(timeout=20)
        assert list(snapshots.iterdir()) == []
        create_topic(broker.address, "gone", 2)  # a new topic of the name starts afresh
        produce_all(broker.address, "gone", [(b"k%d" % i, b"new") for i in range(8)], **idempotent)
        assert {m.value() for m in read_topic(broker.address, "gone", 8)} == {b"new"}
        assert " ERROR " not in broker.output() and "WARNING" not in broker.output()


def test_producer_ids_start_at_zero_when_a_topic_comes_first(tmp_path: Path) -> None:
    """A fresh broker with a topic made before the first InitProducerId: the id file did not
    exist yet, and the topic's placement file was taken for a sign that it had been lost."""
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KTopicPartition

    with running_broker(tmp_path / "data") as broker:
        create_topic(broker.address, "first", 1)
        produce_all(broker.address, "first", [(None, b"x")], **{"enable.idempotence": True})
        tp = KTopicPartition("first", 0)
        admin = KafkaAdminClient(bootstrap_servers=broker.address)
        try:
            active = admin.describe_producers([tp])[tp].active_producers
        finally:
            admin.close()
        assert [p.producer_id for p in active] == [0]
        assert "missing or damaged" not in broker.output()
        assert "ERROR" not in broker.output()


def test_a_producer_the_partition_does_not_know_goes_on_at_its_sequence(tmp_path: Path) -> None:
    """A producer whose state the partition lost (here its topic was deleted and made again
    under it, as librdkafka's metadata request re-creates it) goes on at its next sequence,
    as Kafka takes it up since KIP-360; UNKNOWN_PRODUCER_ID made librdkafka fail fatally
    when it had requests in flight (found by a probe)."""
    with running_broker(tmp_path / "b") as broker:
        create_topic(broker.address, "t", 1)
        with connect(broker.address) as sock:
            for seq in range(3):
                assert produce(sock, "t", batch(b"A%d" % seq, A, seq)) == (0, seq)
        admin = AdminClient({"bootstrap.servers": broker.address})
        admin.delete_topics(["t"])["t"].result(20)
        create_topic(broker.address, "t", 1)
        with connect(broker.address) as sock:
            assert produce(sock, "t", batch(b"A3", A, 3)) == (0, 0)
            assert produce(sock, "t", batch(b"A3", A, 3)) == (0, 0)  # its retry: a duplicate
            code, _ = produce(sock, "t", batch(b"A9", A, 9))  # a gap is still refused
            assert code not in (0, UNKNOWN_PRODUCER_ID)
        assert [m.value() for m in read_topic(broker.address, "t", 1)] == [b"A3"]
