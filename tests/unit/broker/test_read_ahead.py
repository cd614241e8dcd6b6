"""How much of a connection's pipelined requests the broker reads ahead of its answers.

A Fetch that long-polls holds up the answers after it (they go out in request order). With
a read-ahead budget of 1 MiB, of two 600 KiB produce requests pipelined behind it only the
first is read (and appended) until the Fetch is answered; the second waits in the socket.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.unit.broker.conftest import LoopBroker, recv_frame

KiB = 1024


def batch(value: bytes) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 24)
    b.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(b.build())


def framed(request: object, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="read-ahead")  # type: ignore[attr-defined]
    return bytes(request.encode(header=True, framed=True))  # type: ignore[attr-defined]


def end_offset(consumer: Consumer, topic: str) -> int:
    return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])


def test_a_connection_reads_ahead_at_most_its_byte_budget(tmp_path: Path) -> None:
    broker = LoopBroker(tmp_path / "data", max_in_flight_bytes_per_connection=1024 * KiB).start()
    consumer = None
    try:
        admin = AdminClient({"bootstrap.servers": broker.address})
        for future in admin.create_topics([NewTopic("big", 1, 1), NewTopic("idle", 1, 1)]).values():
            future.result(30)
        consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "watch"})
        fetch = FetchRequest[4]
        ft = fetch.FetchTopic
        long_poll = fetch(replica_id=-1, max_wait_ms=5000, min_bytes=1, max_bytes=1 << 20,
                          isolation_level=0, topics=[ft(topic="idle", partitions=[ft.FetchPartition(
                              partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
        produce = ProduceRequest[8]
        pt = produce.TopicProduceData

        def produce_big() -> ProduceRequest:
            return produce(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[pt(
                name="big", partition_data=[pt.PartitionProduceData(
                    index=0, records=batch(b"x" * (600 * KiB)))])])

        host, port = broker.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(framed(long_poll, 1) + framed(produce_big(), 2) + framed(produce_big(), 3))
            started = time.monotonic()
            # the first produce is read and appended at once...
            deadline = started + 3.5
            while end_offset(consumer, "big") < 1:
                assert time.monotonic() < deadline, "the first produce was never appended"
            # ...the second only once the Fetch before them is answered (5 s from the start)
            assert end_offset(consumer, "big") == 1
            assert time.monotonic() - started < 4.5, "too slow to tell: the Fetch may have been answered"
            answers = [recv_frame(sock) for _ in range(3)]
        # in request order, each answered (the correlation id leads each answer)
        assert [struct.unpack_from(">i", raw)[0] for raw in answers] == [1, 2, 3]
        assert FetchResponse[4].decode(answers[0], header=True).responses[0].partitions[0].error_code == 0
        for raw in answers[1:]:
            resp = ProduceResponse[8].decode(raw, header=True)
            assert resp.responses[0].partition_responses[0].error_code == 0
        assert end_offset(consumer, "big") == 2
    finally:
        if consumer is not None:
            consumer.close()
        broker.close()


def test_answers_to_a_connection_reset_with_requests_in_flight_are_dropped_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client gone (reset) with many requests pipelined: the answers queued for it are
    dropped, not written one by one to the lost connection (asyncio logged "socket.send()
    raised exception." for each, 46 lines per connection), and the broker serves on."""
    from kafka.protocol.metadata import MetadataRequest

    broker = LoopBroker(tmp_path / "data").start()
    try:
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            for _ in range(5):
                sock = broker.connect()
                sock.sendall(b"".join(framed(MetadataRequest[1](topics=None), i) for i in range(50)))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()  # a reset, the answers unread
            with broker.connect() as sock:  # still serving
                sock.sendall(framed(MetadataRequest[1](topics=None), 1))
                assert recv_frame(sock)
        sent = [r for r in caplog.records if "socket.send() raised exception" in r.getMessage()]
        assert len(sent) <= 5, len(sent)
    finally:
        broker.close()
