"""Malformed input — garbage, an oversized length prefix, an unknown API, a batch with a bad
CRC — gets an error response or a closed connection, while another client keeps working
and nothing is written."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.compat.broker.helpers import BrokerProcess, create_topic

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def assert_closed(sock: socket.socket) -> None:
    """The server closes without answering (EOF, or a reset)."""
    sock.settimeout(10)
    with contextlib.suppress(ConnectionResetError):
        assert sock.recv(1) == b""


def high_watermark(address: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": address, "group.id": "hw"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        c.close()


def produce_frame(topic: str, records: bytes, correlation_id: int = 7) -> bytes:
    req_cls = ProduceRequest[8]
    t = req_cls.TopicProduceData
    req = req_cls(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        t(name=topic, partition_data=[t.PartitionProduceData(index=0, records=records)])])
    req.with_header(correlation_id=correlation_id, client_id="malformed-test")
    return bytes(req.encode(header=True, framed=True))


def valid_batch() -> bytearray:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    for i in range(3):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=b"x%d" % i, headers=[])
    return b.build()


class Background:
    """A librdkafka producer that keeps producing (and must keep succeeding) meanwhile."""

    def __init__(self, address: str, topic: str) -> None:
        self.delivered = 0
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 1})
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(err)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._producer.produce(self._topic, b"bg", on_delivery=self._report)
            self._producer.poll(0.005)
        self._producer.flush(20)

    def __enter__(self) -> Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_bad_frames_close_or_error_while_others_work(broker: BrokerProcess, topic_name: str) -> None:
    target = topic_name + "-target"
    create_topic(broker.address, topic_name, 1)
    create_topic(broker.address, target, 1)
    with Background(broker.address, topic_name) as bg:
        before = bg.delivered

        # garbage bytes: a plausible length, then nonsense
        with connect(broker.address) as s:
            s.sendall(struct.pack(">i", 64) + bytes(range(64)))
            assert_closed(s)

        # a length prefix beyond the frame limit (or negative) closes before reading it
        for size in (2**31 - 1, -5, 0):
            with connect(broker.address) as s:
                s.sendall(struct.pack(">i", size) + b"\x00" * 16)
                assert_closed(s)

        # an unknown API key
        with connect(broker.address) as s:
            s.sendall(struct.pack(">ihhih", 10, 999, 0, 1, -1))
            assert_closed(s)

        # ApiVersions newer than ours: a v0-format UNSUPPORTED_VERSION answer (KIP-511)
        with connect(broker.address) as s:
            s.sendall(struct.pack(">ihhih", 10, 18, 99, 42, -1))
            frame = recv_frame(s)
            resp = ApiVersionsResponse.decode(frame, version=0, header=True)
            assert resp.header.correlation_id == 42 and resp.error_code == 35
            assert any(k.api_key == 0 for k in resp.api_keys)

        # a batch with a bad CRC: CORRUPT_MESSAGE for that partition, nothing written
        batch = valid_batch()
        batch[-1] ^= 0xFF
        with connect(broker.address) as s:
            s.sendall(produce_frame(target, bytes(batch)))
            resp = ProduceResponse.decode(recv_frame(s), version=8, header=True)
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == 2  # CORRUPT_MESSAGE
            # the connection stays usable: a good batch on it is accepted
            s.sendall(produce_frame(target, bytes(valid_batch()), correlation_id=8))
            resp = ProduceResponse.decode(recv_frame(s), version=8, header=True)
            ok = resp.responses[0].partition_responses[0]
            assert ok.error_code == 0 and ok.base_offset == 0

        # a truncated batch (length field says more than present)
        with connect(broker.address) as s:
            s.sendall(produce_frame(target, bytes(valid_batch())[:-7]))
            resp = ProduceResponse.decode(recv_frame(s), version=8, header=True)
            assert resp.responses[0].partition_responses[0].error_code == 2

        deadline = time.monotonic() + 20
        while bg.delivered <= before + 20 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not bg.errors, bg.errors
    assert bg.delivered > before + 20, "the well-behaved producer stalled"
    assert high_watermark(broker.address, target) == 3  # only the one good batch
    log = broker.output()
    assert "Traceback" not in log
    assert "frame size 2147483647 outside" in log and "unknown api key 999" in log
    assert "v515 is not supported" in log and "corrupt batch rejected" in log
