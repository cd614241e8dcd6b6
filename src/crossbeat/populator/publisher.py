"""Producing populator messages with librdkafka (confluent-kafka) and waiting for delivery."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from crossbeat.errors import CrossbeatError
from crossbeat.populator.client_settings import RECONNECT
from crossbeat.populator.extension import CHECKPOINT_KIND, Message

log = logging.getLogger(__name__)

CHECKPOINT_KEY = b"__crossbeat_checkpoint__"


class PublishError(CrossbeatError):
    """The broker did not acknowledge every message of a batch."""


def ensure_topics(
    brokers: str, topics: Iterable[str], partitions: int, *, timeout: float = 30.0
) -> None:
    """Create missing topics; an existing topic is fine whatever its partition count."""
    admin = AdminClient({"bootstrap.servers": brokers, **RECONNECT})
    existing = set(admin.list_topics(timeout=timeout).topics)
    missing = [t for t in topics if t not in existing]
    if not missing:
        return
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=partitions, replication_factor=-1) for t in missing],
        operation_timeout=timeout,
    )
    for topic, fut in futures.items():
        try:
            fut.result(timeout=timeout)
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise PublishError(f"cannot create topic {topic}: {exc}") from exc


class Publisher:
    """Keyed produce of a batch, then a bounded wait until the broker acknowledged all of it.

    `acks=all`, and one request in flight per connection so a retried request cannot
    overtake a later one: the messages of one key stay in journal order.
    """

    def __init__(self, brokers: str, *, extra: Mapping[str, Any] | None = None) -> None:
        conf: dict[str, Any] = {
            **RECONNECT,
            "bootstrap.servers": brokers,
            "acks": "all",
            "linger.ms": 5,
            "max.in.flight.requests.per.connection": 1,
            "message.timeout.ms": 60_000,
        }
        conf.update(extra or {})
        self._producer = Producer(conf)

    def publish(self, messages: Iterable[Message], *, timeout: float = 90.0) -> int:
        """Produce every message and wait for all delivery reports; returns the count.

        Raises PublishError if any message was not acknowledged (nothing may then be
        checkpointed: the caller republishes the batch, which is allowed redelivery).
        """
        errors: list[str] = []
        count = 0

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        for message in messages:
            self._produce(message.topic, message.key, message.encoded_value(), on_delivery)
            count += 1
        self._flush(timeout)
        if errors:
            raise PublishError(f"{len(errors)} of {count} messages not delivered: {errors[0]}")
        return count

    def publish_checkpoint(self, topics: Iterable[str], seq: int, *, timeout: float = 60.0) -> None:
        """Write a checkpoint record `{kind: checkpoint, seq}` into every partition of each topic.

        This is the restart point another site can use after a failover (seed 001):
        everything the journal held up to `seq` is in the topic before this record.
        Processors skip records whose kind is `checkpoint`.
        """
        errors: list[str] = []

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        value = orjson.dumps(
            {"kind": CHECKPOINT_KIND, "schema": 1, "seq": seq, "ts": time.time()}
        )
        for topic in topics:
            meta = self._producer.list_topics(topic, timeout=timeout).topics.get(topic)
            partitions = sorted(meta.partitions) if meta is not None and meta.partitions else [0]
            for partition in partitions:
                self._produce(topic, CHECKPOINT_KEY, value, on_delivery, partition=partition)
        self._flush(timeout)
        if errors:
            raise PublishError(f"checkpoint record not delivered: {errors[0]}")

    def _produce(
        self, topic: str, key: bytes, value: bytes, cb: Any, partition: int | None = None
    ) -> None:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": cb}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                # The local queue is full: serve delivery reports to make room.
                self._producer.poll(0.1)

    def _flush(self, timeout: float) -> None:
        remaining = self._producer.flush(timeout)
        if remaining:
            raise PublishError(f"{remaining} messages still unacknowledged after {timeout}s")

    def close(self) -> None:
        self._producer.flush(10)
