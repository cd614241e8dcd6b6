"""Helpers for driving `crossbeat broker` (a real subprocess on port 0) with real clients."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.support.procs import Service, start_service


class BrokerProcess:
    """A `crossbeat broker` over one data directory that tests may kill and restart."""

    def __init__(self, data_dir: Path, extra: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.extra = extra or []
        self.service: Service | None = None

    def start(self) -> Service:
        self.service = start_service(
            ["broker", "--data-dir", str(self.data_dir), "--listen", "127.0.0.1:0", *self.extra]
        )
        return self.service

    @property
    def address(self) -> str:
        assert self.service is not None
        return self.service.address

    def stop(self) -> int:
        assert self.service is not None
        return self.service.stop()

    def kill(self) -> None:
        assert self.service is not None
        self.service.kill()

    def output(self) -> str:
        return "".join(self.service.output) if self.service else ""


def create_topic(address: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                                  operation_timeout=10)
    futures[name].result(timeout=20)


def produce_all(address: str, topic: str, messages: list[tuple[bytes | None, bytes]],
                **config: Any) -> list[tuple[int, int, bytes]]:
    """Produce (key, value) pairs; return (partition, offset, value) per delivery report."""
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5, **config})
    delivered: list[tuple[int, int, bytes]] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset(), msg.value()))

    for key, value in messages:
        producer.produce(topic, key=key, value=value, on_delivery=report)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages not delivered"
    assert not errors, errors
    return delivered


def consume_n(consumer: Any, n: int, timeout: float = 30) -> list[Any]:
    """Poll until `n` messages arrived (bounded by `timeout`)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    return got


def new_consumer(address: str, group: str, **config: Any) -> Any:
    return Consumer({
        "bootstrap.servers": address,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 200,
        **config,
    })


def consume_commit_and_leave(address: str, group: str, topic: str, n: int) -> None:
    """A member of `group` reads `n` messages of `topic`, commits and leaves: the group is
    then Empty, with committed offsets and protocol type 'consumer'."""
    consumer = new_consumer(address, group)
    consumer.subscribe([topic])
    assert len(consume_n(consumer, n)) == n
    consumer.commit(asynchronous=False)
    consumer.close()


def assigned_member(address: str, group: str, topic: str, timeout: float = 30) -> Any:
    """A consumer of `group` subscribed to `topic`, once it has its partitions (bounded)."""
    member = new_consumer(address, group)
    member.subscribe([topic])
    deadline = time.monotonic() + timeout
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.1)
    if not member.assignment():
        member.close()
        raise AssertionError("the live consumer never got its partition")
    return member


def read_topic(address: str, topic: str, expected: int, timeout: float = 30) -> list[Any]:
    """Every message of `topic` (at least `expected`), read by a throw-away group."""
    consumer = new_consumer(address, f"reader-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([topic])
    try:
        return consume_n(consumer, expected, timeout)
    finally:
        consumer.close()


ConsumerFactory = Callable[..., Any]


def configured_broker(data_dir: Path, broker_settings: str = "") -> BrokerProcess:
    """A BrokerProcess over `data_dir` with the `[broker]` settings `broker_settings` (TOML
    lines) in a config file beside it; not started."""
    if not broker_settings:
        return BrokerProcess(data_dir)
    config = data_dir.parent / f"{data_dir.name}.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"[broker]\n{broker_settings}\n")
    return BrokerProcess(data_dir, ["--config", str(config)])


@contextmanager
def running_broker(data_dir: Path, broker_settings: str = "") -> Iterator[BrokerProcess]:
    """`configured_broker`, started, and stopped at exit unless a test stopped or killed it."""
    proc = configured_broker(data_dir, broker_settings)
    proc.start()
    try:
        yield proc
    finally:
        if proc.service is not None and proc.service.proc.poll() is None:
            proc.stop()


def watermarks(address: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(low, high) watermark offsets of one partition, as a consumer reads them."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "wm"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return low, high
    finally:
        consumer.close()


def stable_offsets(address: str, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0, by ListOffsets."""
    admin = AdminClient({"bootstrap.servers": address})
    tp = TopicPartition(topic, 0)
    out = []
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        result = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)
        out.append(result[tp].result(timeout=20).offset)
    return out[0], out[1]
