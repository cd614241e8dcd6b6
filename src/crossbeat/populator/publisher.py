"""Producing populator messages with librdkafka (confluent-kafka) and waiting for delivery."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import orjson
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from crossbeat.errors import CrossbeatError
from crossbeat.populator.client_settings import RECONNECT
from crossbeat.populator.extension import CHECKPOINT_KIND, Message

log = logging.getLogger(__name__)

CHECKPOINT_KEY = b"__crossbeat_checkpoint__"


# The longest a blocking librdkafka call runs before we look at the stop event again: a
# Python signal handler only sets that event, so this bounds how long SIGTERM waits.
STOP_CHECK_S = 0.5
T = TypeVar("T")


class PublishError(CrossbeatError):
    """The broker did not acknowledge every message of a batch."""


class BrokerUnreachable(PublishError):
    """No answer from the broker in time (down, or not yet up): worth retrying."""


class PublishAbandoned(PublishError):
    """Given up because the caller is stopping: the messages were not all acknowledged, so
    nothing may be checkpointed (the batch is published again at the next start)."""


def in_slices(call: Callable[[float], T], timeout: float, stop: threading.Event | None) -> T:
    """`call(t)`, a blocking librdkafka call given a timeout `t`, made again in slices of at
    most STOP_CHECK_S until it returns; its KafkaException once `timeout` has passed or
    `stop` is set. (A signal handler only sets `stop`, which one long call would not see.)"""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return call(max(0.01, min(STOP_CHECK_S, left)))
        except KafkaException:
            if (stop is not None and stop.is_set()) or time.monotonic() >= deadline:
                raise


def _metadata(
    client: Any, brokers: str, timeout: float, stop: threading.Event | None,
    topic: str | None = None,
) -> Any:
    """`client.list_topics` within `timeout`, asked in short slices so that `stop` is seen.

    Raises BrokerUnreachable at the deadline, PublishAbandoned once `stop` is set."""
    try:
        return in_slices(lambda t: client.list_topics(topic, timeout=t), timeout, stop)
    except KafkaException as exc:
        if stop is not None and stop.is_set():
            raise PublishAbandoned(f"stopped while waiting for broker {brokers}") from exc
        raise BrokerUnreachable(
            f"broker {brokers} unreachable after {timeout:g}s: {exc.args[0]}"
        ) from exc


def ensure_topics(
    brokers: str, topics: Iterable[str], partitions: int, *, timeout: float = 30.0,
    stop: threading.Event | None = None,
) -> None:
    """Create missing topics; an existing topic is fine whatever its partition count.

    Raises BrokerUnreachable when the broker does not answer within `timeout` (also when a
    creation times out or fails with a retriable error), PublishError when it refuses a
    topic, and PublishAbandoned as soon as `stop` is set while waiting for it. Nothing
    librdkafka raises escapes unwrapped.
    """
    admin = AdminClient({"bootstrap.servers": brokers, **RECONNECT})
    existing = set(_metadata(admin, brokers, timeout, stop).topics)
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
        except concurrent.futures.TimeoutError as exc:
            raise BrokerUnreachable(f"cannot create topic {topic}: no answer in {timeout:g}s") from exc
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            if isinstance(err, KafkaError) and (
                err.retriable()
                or err.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                                  KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT)
            ):
                raise BrokerUnreachable(f"cannot create topic {topic}: {err}") from exc
            raise PublishError(f"cannot create topic {topic}: {exc}") from exc


class Publisher:
    """Keyed produce of a batch, then a bounded wait until the broker acknowledged all of it.

    `acks=all`, and one request in flight per connection so a retried request cannot
    overtake a later one: the messages of one key stay in journal order.

    With `stop`, every wait (delivery, metadata, a full local queue) gives up within about
    STOP_CHECK_S once it is set, raising PublishAbandoned after purging what is still
    queued: a stopping populator need not wait for `message.timeout.ms` of a broker that
    is away.
    """

    def __init__(
        self, brokers: str, *, extra: Mapping[str, Any] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self._brokers = brokers
        self._stop = stop
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
        checkpointed: the caller republishes the batch, which is allowed redelivery);
        PublishAbandoned, a PublishError, when the stop event was set meanwhile.
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
            meta = _metadata(self._producer, self._brokers, timeout, self._stop, topic)
            meta = meta.topics.get(topic)
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
                # The local queue is full: serve delivery reports to make room (which a
                # broker that is away may not give before message.timeout.ms).
                self._producer.poll(0.1)
                self._abandon_if_stopping()

    def _flush(self, timeout: float) -> None:
        # In slices, not one flush(timeout): with the broker away, a single flush blocks
        # until message.timeout.ms expires and a SIGTERM waited that long.
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            remaining = self._producer.flush(max(0.0, min(STOP_CHECK_S, left)))
            if not remaining:
                return
            self._abandon_if_stopping()
            if time.monotonic() >= deadline:
                raise PublishError(f"{remaining} messages still unacknowledged after {timeout}s")

    def _abandon_if_stopping(self) -> None:
        if self._stop is None or not self._stop.is_set():
            return
        # Drop what is still queued: it is not checkpointed, so the next start publishes it
        # again; left queued, it would hold the process at exit or arrive unaccounted for.
        pending = len(self._producer)
        self._producer.purge()
        self._producer.flush(0)  # serves the purged messages' delivery reports
        raise PublishAbandoned(f"stopping with {pending} messages unacknowledged")

    def close(self) -> None:
        self._producer.flush(10)
