"""A librdkafka consumer group on `crossbeat broker`: rebalance when a member joins and
when one leaves, commit, and resume from committed offsets after restarting the consumers
and the broker."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.compat.broker.helpers import (
    BrokerProcess,
    create_topic,
    new_consumer,
    produce_all,
)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

PARTITIONS = 4


def poll_until(consumers: list[Any], done: Any, timeout: float = 40,
               sink: list[Any] | None = None) -> None:
    """Poll every consumer (callbacks and rebalances run inside poll) until `done()`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None and sink is not None:
                sink.append(msg)
        if done():
            return
    raise AssertionError("timed out; assignments: "
                         + repr([sorted(tp.partition for tp in c.assignment()) for c in consumers]))


def parts(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def test_group_rebalances_commits_and_resumes(broker: BrokerProcess, topic_name: str) -> None:
    group = f"g-{topic_name}"
    create_topic(broker.address, topic_name, PARTITIONS)
    first = [(f"k{i}".encode(), f"a{i}".encode()) for i in range(80)]
    produce_all(broker.address, topic_name, first, acks="all")

    a = new_consumer(broker.address, group)
    a.subscribe([topic_name])
    seen: list[Any] = []
    poll_until([a], lambda: parts(a) == set(range(PARTITIONS)), sink=seen)

    b = new_consumer(broker.address, group)
    b.subscribe([topic_name])
    poll_until([a, b], lambda: len(parts(a)) == 2 and len(parts(b)) == 2
               and parts(a).isdisjoint(parts(b)), sink=seen)

    poll_until([a, b], lambda: len({m.value() for m in seen}) >= len(first), sink=seen)
    assert {m.value() for m in seen} == {v for _, v in first}
    for c in (a, b):
        c.commit(asynchronous=False)

    b.close()  # LeaveGroup: a takes every partition back
    poll_until([a], lambda: parts(a) == set(range(PARTITIONS)))
    a.close()

    # restart the broker (clean stop) on the same data directory
    assert broker.stop() == 0
    broker.start()
    second = [(f"k{i}".encode(), f"b{i}".encode()) for i in range(40)]
    produce_all(broker.address, topic_name, second, acks="all")

    c = new_consumer(broker.address, group)
    c.subscribe([topic_name])
    resumed: list[Any] = []
    poll_until([c], lambda: len(resumed) >= len(second), sink=resumed)
    deadline = time.monotonic() + 1.0  # nothing old may trail behind
    while time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is not None and msg.error() is None:
            resumed.append(msg)
    c.close()
    assert sorted(m.value() for m in resumed) == sorted(v for _, v in second)


def test_a_commit_made_when_partitions_are_revoked_is_stored(broker: BrokerProcess, topic_name: str) -> None:
    """The textbook pattern: commit what was processed in the revoke callback. It runs
    while the group prepares the rebalance, where Kafka accepts a member's commit; refused
    (REBALANCE_IN_PROGRESS), everything consumed so far was delivered again after the
    rebalance."""
    from confluent_kafka import KafkaException, TopicPartition

    group = f"g-{topic_name}"
    create_topic(broker.address, topic_name, PARTITIONS)
    values = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(100)]
    produce_all(broker.address, topic_name, values, acks="all")
    outcomes: list[Any] = []

    def on_revoke(consumer: Any, _partitions: Any) -> None:
        try:
            outcomes.append(consumer.commit(asynchronous=False))
        except KafkaException as exc:
            outcomes.append(exc.args[0])

    a = new_consumer(broker.address, group)
    a.subscribe([topic_name], on_revoke=on_revoke)
    seen_a: list[Any] = []
    poll_until([a], lambda: len(seen_a) >= len(values), sink=seen_a)

    b = new_consumer(broker.address, group)
    b.subscribe([topic_name])
    seen_b: list[Any] = []
    poll_until([a, b], lambda: bool(outcomes) and len(parts(b)) == 2, sink=seen_b)
    assert isinstance(outcomes[0], list) and all(tp.error is None for tp in outcomes[0]), outcomes
    committed = a.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)], timeout=10)
    assert sum(max(tp.offset, 0) for tp in committed) == len(values)  # -1001: a partition with nothing
    # nothing is delivered again once the partitions moved
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        for c in (a, b):
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                seen_b.append(msg)
    assert seen_b == []
    a.close()
    b.close()
