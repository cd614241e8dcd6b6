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
