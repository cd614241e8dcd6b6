"""What one client can cost the others, and what a malformed batch is answered, against a
real `crossbeat broker` process with hand-made frames (kafka-python's protocol classes):

- a small compressed batch of millions of records is rebuilt off the event loop, so other
  clients' requests are answered meanwhile;
- a Fetch response carries at most the broker's `fetch_max_bytes` (Kafka's fetch.max.bytes)
  of records, and a partition named many times is answered once;
- a connection idle `connections_max_idle_ms` (nothing in flight, nothing received) is
  closed, also one holding half a frame, while one that keeps talking, a slowly arriving
  frame and a long-polling Fetch are not;
- a structurally invalid batch is INVALID_RECORD (87, not retriable), a damaged one
  CORRUPT_MESSAGE (2, retriable), as Apache Kafka answers them.

Broker settings are passed as CROSSBEAT_BROKER_* environment variables: a broker that does
not know a setting ignores it (a config file naming it would not start), so these tests run
— and fail for what they check — against a broker without the fix too."""

from __future__ import annotations

import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import zstandard
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from crc32c import crc32c
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.compat.broker.helpers import BrokerProcess, watermarks
from tests.support.procs import start_service

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD = 2, 10, 87
T0 = 1_700_000_000_000


@contextmanager
def broker_with(data_dir: Path, **settings: Any) -> Iterator[BrokerProcess]:
    """A started broker over `data_dir` with `settings` (BrokerSettings field names) given
    as CROSSBEAT_BROKER_* environment variables; stopped at exit."""
    env = {f"CROSSBEAT_BROKER_{name.upper()}": str(value) for name, value in settings.items()}
    proc = BrokerProcess(data_dir)
    proc.service = start_service(
        ["broker", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"], env=env)
    try:
        yield proc
    finally:
        if proc.service.proc.poll() is None:
            proc.stop()


def connect(address: str, timeout: float = 10) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def frame(request: Any, correlation_id: int = 1) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="bounds-test")
    return bytes(request.encode(header=True, framed=True))


def call(sock: socket.socket, request: Any, response_cls: Any, correlation_id: int = 1) -> Any:
    sock.sendall(frame(request, correlation_id))
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return response_cls.decode(recv_exact(sock, size), version=request.API_VERSION, header=True)


def create(address: str, topic: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=configs)],
                                  operation_timeout=10)
    futures[topic].result(timeout=20)


def fix_crc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return buf


def raw_batch(records: bytes, count: int, *, attributes: int = 0,
              last_offset_delta: int | None = None) -> bytearray:
    """A RecordBatch v2 header (right length and CRC) over `records`, claiming `count`."""
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    buf = bytearray(struct.pack(">qiibIhiqqqhii", 0, 0, 0, 2, 0, attributes, delta, T0, T0,
                                -1, -1, -1, count)) + records
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    return fix_crc(buf)


def batch(n: int = 3, value: bytes = b"v") -> bytearray:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
    for i in range(n):
        b.append(i, timestamp=T0 + i, key=None, value=value, headers=[])
    return bytearray(b.build())


def produce_request(topic: str, records: bytes, partition: int = 0) -> Any:
    req = ProduceRequest[8]
    t = req.TopicProduceData
    return req(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[t(
        name=topic, partition_data=[t.PartitionProduceData(index=partition, records=records)])])


def produce(address: str, topic: str, records: bytes, partition: int = 0) -> Any:
    with connect(address, timeout=60) as sock:
        resp = call(sock, produce_request(topic, records, partition), ProduceResponse)
    return resp.responses[0].partition_responses[0]


def metadata(sock: socket.socket, correlation_id: int) -> float:
    """Seconds a Metadata request (all topics) takes to be answered on `sock`."""
    start = time.monotonic()
    call(sock, MetadataRequest[1](topics=None), MetadataResponse[1], correlation_id)
    return time.monotonic() - start


# -- 1. a batch of millions of records is rebuilt off the event loop ------------------------

def test_a_tiny_batch_of_millions_of_records_does_not_stall_other_clients(
        broker: BrokerProcess, topic_name: str) -> None:
    """A 2 KB zstd batch of 2M empty records to a compression.type=lz4 topic must be
    rebuilt (seconds of work, per record); before, it was rebuilt on the event loop because
    it is small compressed, and every other client waited seconds for any answer."""
    create(broker.address, topic_name, **{"compression.type": "lz4"})
    record = bytes([0, 0, 0, 1, 1, 0])  # attributes, ts delta, offset delta, null key/value, 0 headers
    n = 2_000_000
    bomb = raw_batch(zstandard.ZstdCompressor(level=19).compress(
        (bytes([len(record) * 2]) + record) * n), n, attributes=4)
    assert len(bomb) < 4096

    answered = threading.Event()
    outcome: list[Any] = []

    def producer() -> None:
        try:
            outcome.append(produce(broker.address, topic_name, bytes(bomb)))
        except BaseException as exc:  # surfaced below
            outcome.append(exc)
        finally:
            answered.set()

    with connect(broker.address) as other:
        metadata(other, 0)  # connected and served before the bomb goes out
        thread = threading.Thread(target=producer)
        thread.start()
        latencies: list[float] = []
        try:
            deadline = time.monotonic() + 120
            cid = 1
            while not answered.is_set() and time.monotonic() < deadline:
                other.settimeout(2.0)  # the bound: a stalled broker fails here
                try:
                    latencies.append(metadata(other, cid))
                except TimeoutError:
                    raise AssertionError(f"Metadata not answered in 2 s while the batch was "
                                         f"being rebuilt (answered before: {latencies})") from None
                cid += 1
                time.sleep(0.05)  # pacing this client, not waiting for anything
        finally:
            thread.join(120)
    [result] = outcome
    assert not isinstance(result, BaseException), result
    # 2M records rebuild to ~8 MB of lz4, over max.message.bytes; either answer is fine
    assert result.error_code in (0, MESSAGE_TOO_LARGE), result
    assert max(latencies) < 2.0, latencies
    # the rebuild took long enough for other requests to be answered during it
    assert len(latencies) >= 5, latencies


# -- 2. fetch.max.bytes, and a partition named many times ----------------------------------

def fetch(address: str, parts: list[tuple[str, int, int]], max_bytes: int = 2**31 - 1,
          partition_max_bytes: int = 2**31 - 1) -> Any:
    """A Fetch v11 of (topic, partition, offset)s in that order, with no wait."""
    req = FetchRequest[11]
    ft = req.FetchTopic
    topics = []
    for topic, partition, offset in parts:
        if not topics or topics[-1].topic != topic:
            topics.append(ft(topic=topic, partitions=[]))
        topics[-1].partitions.append(ft.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset,
            log_start_offset=-1, partition_max_bytes=partition_max_bytes))
    request = req(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
                  isolation_level=0, session_id=0, session_epoch=-1, topics=topics,
                  forgotten_topics_data=[], rack_id="")
    with connect(address, timeout=60) as sock:
        return call(sock, request, FetchResponse)


def batch_sizes(records: bytes | None) -> list[int]:
    out = []
    memory = MemoryRecords(bytes(records or b""))
    while (b := memory.next_batch()) is not None:
        out.append(b.size_in_bytes)
    return out


def test_fetch_response_is_capped_by_fetch_max_bytes(tmp_path: Path, topic_name: str) -> None:
    cap = 1 << 20
    with broker_with(tmp_path / "data", fetch_max_bytes=cap) as broker:
        create(broker.address, topic_name, 4, **{"max.message.bytes": str(3 << 20)})
        for partition in range(4):
            for _ in range(3):
                assert produce(broker.address, topic_name, bytes(batch(1, b"x" * 200_000)),
                               partition).error_code == 0
        everything = [(topic_name, p, 0) for p in range(4)]

        # the request allows 2 GiB, the broker 1 MiB: whole batches up to the cap
        resp = fetch(broker.address, everything)
        sizes = [batch_sizes(p.records) for p in resp.responses[0].partitions]
        assert all(p.error_code == 0 for p in resp.responses[0].partitions)
        total = sum(map(sum, sizes))
        assert 4 * 200_000 < total <= cap, sizes
        # a smaller request limit still applies
        resp = fetch(broker.address, everything, max_bytes=450_000)
        assert sum(sum(batch_sizes(p.records)) for p in resp.responses[0].partitions) <= 450_000

        # KIP-74: the first batch of the first partition with data comes whole, even over
        # the cap (else a consumer could never pass it); nothing more comes with it
        big = topic_name + "-big"
        create(broker.address, big, **{"max.message.bytes": str(3 << 20)})
        assert produce(broker.address, big, bytes(batch(1, b"y" * 1_500_000))).error_code == 0
        assert produce(broker.address, big, bytes(batch(1, b"z" * 10))).error_code == 0
        resp = fetch(broker.address, [(big, 0, 0), (topic_name, 0, 0)])
        [first], [second] = ([p for p in t.partitions] for t in resp.responses)
        assert len(batch_sizes(first.records)) == 1 and batch_sizes(first.records)[0] > cap
        assert batch_sizes(second.records) == []

        # what Kafka lists it as
        admin = AdminClient({"bootstrap.servers": broker.address})
        configs = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")])
        [described] = configs.values()
        assert described.result(timeout=20)["fetch.max.bytes"].value == str(cap)


def test_a_partition_named_many_times_is_answered_once(
        broker: BrokerProcess, topic_name: str) -> None:
    """Before, each repeat was answered with the partition's data again: a 1.5 KB request
    naming an 8 MB partition 50 times made a 381 MiB response. Kafka's fetch data is a map:
    one answer, where the partition was first named, for the offset it was last named with."""
    create(broker.address, topic_name, 2)
    for _ in range(3):
        assert produce(broker.address, topic_name, bytes(batch(1, b"w" * 100_000))).error_code == 0
    assert produce(broker.address, topic_name, bytes(batch(2)), 1).error_code == 0
    one = sum(batch_sizes(fetch(broker.address, [(topic_name, 0, 0)]).responses[0]
                          .partitions[0].records))
    assert one > 300_000

    named = [(topic_name, 0, 0)] * 50 + [(topic_name, 1, 0), (topic_name, 0, 2)]
    resp = fetch(broker.address, named)
    [topic] = resp.responses
    assert [p.partition_index for p in topic.partitions] == [0, 1]
    p0, p1 = topic.partitions
    # partition 0 from offset 2, as it was last named: one batch
    assert len(batch_sizes(p0.records)) == 1 and len(batch_sizes(p1.records)) == 1
    assert [r.offset for r in _records(p0.records)] == [2]


def _records(records: bytes | None) -> list[Any]:
    out = []
    memory = MemoryRecords(bytes(records or b""))
    while (b := memory.next_batch()) is not None:
        out.extend(b)
    return out


# -- 3. idle connections are closed ----------------------------------------------------------

def closed_within(sock: socket.socket, bound: float, since: float | None = None) -> float:
    """Seconds from `since` (default: now) until the broker closes `sock` (EOF or reset);
    fails after `bound` seconds of waiting."""
    sock.settimeout(bound)
    start = time.monotonic() if since is None else since
    try:
        data = sock.recv(1)
    except ConnectionResetError:
        data = b""
    except TimeoutError:
        raise AssertionError(f"still open after {bound} s") from None
    assert data == b"", data
    return time.monotonic() - start


def api_versions(sock: socket.socket, correlation_id: int) -> None:
    resp = call(sock, ApiVersionsRequest[0](), ApiVersionsResponse, correlation_id)
    assert resp.error_code == 0 and resp.header.correlation_id == correlation_id


def test_idle_connections_are_closed(tmp_path: Path, topic_name: str) -> None:
    with broker_with(tmp_path / "data", connections_max_idle_ms=500) as broker:
        create(broker.address, topic_name)
        start = time.monotonic()
        idle = connect(broker.address)
        half_frame = connect(broker.address)
        half_frame.sendall(struct.pack(">i", 100) + b"\x00" * 10)  # 10 of 100 bytes
        half_prefix = connect(broker.address)
        half_prefix.sendall(b"\x00\x00")
        answered = connect(broker.address)
        api_versions(answered, 1)  # idle once answered
        with idle, half_frame, half_prefix, answered:
            for sock in (idle, half_frame, half_prefix, answered):
                assert 0.4 < closed_within(sock, 10, since=start) < 10

        # a client that keeps talking, more slowly than the limit in all, stays connected
        with connect(broker.address) as talker:
            start = time.monotonic()
            cid = 0
            while time.monotonic() - start < 2.0:
                cid += 1
                api_versions(talker, cid)
                time.sleep(0.2)  # pacing the client, well inside the 500 ms limit
            # a frame trickling in a byte every 100 ms (2.5 s in all) is not idle
            data = frame(ApiVersionsRequest[0](), 99)
            for i in range(len(data)):
                talker.sendall(data[i:i + 1])
                time.sleep(0.1)
            (size,) = struct.unpack(">i", recv_exact(talker, 4))
            resp = ApiVersionsResponse[0].decode(recv_exact(talker, size), header=True)
            assert resp.header.correlation_id == 99

            # a Fetch long-polling 2 s (4x the limit) is in flight, not idle: answered
            req = FetchRequest[11]
            ft = req.FetchTopic
            long_poll = req(
                replica_id=-1, max_wait_ms=2000, min_bytes=1, max_bytes=1 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, topics=[ft(
                    topic=topic_name, partitions=[ft.FetchPartition(
                        partition=0, current_leader_epoch=-1, fetch_offset=0,
                        log_start_offset=-1, partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[], rack_id="")
            start = time.monotonic()
            resp = call(talker, long_poll, FetchResponse, 100)
            assert resp.responses[0].partitions[0].error_code == 0
            assert time.monotonic() - start >= 1.9
            api_versions(talker, 101)  # and the connection is still open after it
            assert 0.4 < closed_within(talker, 10) < 10  # until it falls silent
        log = broker.output()
    assert "inside a frame (10 of 100 bytes)" in log and "inside a frame size prefix" in log
    assert "Traceback" not in log


# -- 4. error codes of invalid batches ----------------------------------------------------

def legacy_message_set(magic: int) -> bytes:
    """One message of the magic 0 or 1 format (a v0/v1 message set)."""
    value = b"hello"
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", T0)
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def test_invalid_batches_are_invalid_record_and_damaged_ones_corrupt_message(
        broker: BrokerProcess, topic_name: str) -> None:
    create(broker.address, topic_name)
    good = batch(3)
    two_records = bytes(batch(2))

    invalid = {
        # ProduceRequest.validateRecords: v3+ carries exactly one batch of magic 2
        "magic 0 message set": legacy_message_set(0),
        "magic 1 message set": legacy_message_set(1),
        "two batches": bytes(good) + bytes(batch(1)),
        "trailing bytes": bytes(good) + b"junk",
        # LogValidator: the offset range and the count must agree, and be positive
        "count 1000, last offset delta 2": bytes(fix_crc(_with(good, count=1000))),
        "count 3, last offset delta 999": bytes(fix_crc(_with(good, delta=999))),
        "empty batch": bytes(raw_batch(b"", 0)),
        "negative count": bytes(fix_crc(_with(good, count=-3, delta=-4))),
    }
    for name, records in invalid.items():
        answer = produce(broker.address, topic_name, records)
        assert answer.error_code == INVALID_RECORD, (name, answer)

    damaged = bytearray(good)
    damaged[-1] ^= 0xFF
    short = bytearray(good)
    struct.pack_into(">i", short, 8, len(short) - 12 - 5)  # the CRC then covers other bytes
    corrupt = {
        "CRC mismatch": bytes(damaged),
        "batch length short of the bytes": bytes(short),
        # (Kafka finds no batch in these bytes and answers INVALID_RECORD; kept
        # CORRUPT_MESSAGE here, as for every length that disagrees with the bytes)
        "batch length past the bytes": bytes(good)[:-7],
        "batch length -1": bytes(_with(good, length=-1)),
    }
    for name, records in corrupt.items():
        answer = produce(broker.address, topic_name, records)
        assert answer.error_code == CORRUPT_MESSAGE, (name, answer)

    assert watermarks(broker.address, topic_name) == (0, 0)  # nothing of them written
    assert produce(broker.address, topic_name, two_records).error_code == 0
    assert watermarks(broker.address, topic_name) == (0, 2)


def _with(buf: bytearray, *, count: int | None = None, delta: int | None = None,
          length: int | None = None) -> bytearray:
    out = bytearray(buf)
    if count is not None:
        struct.pack_into(">i", out, 57, count)
    if delta is not None:
        struct.pack_into(">i", out, 23, delta)
    if length is not None:
        struct.pack_into(">i", out, 8, length)
    return out
