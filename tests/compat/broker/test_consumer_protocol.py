"""librdkafka consumers with `group.protocol=consumer` (KIP-848) on `crossbeat broker`:
server-side assignment, commit and resume, members joining, leaving and dying, and classic
groups beside consumer groups."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient

from tests.compat.broker.helpers import (
    BrokerProcess,
    consume_n,
    create_topic,
    new_consumer,
    produce_all,
    running_broker,
)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

HEARTBEAT_MS = 300
SESSION_MS = 3000


@pytest.fixture
def fast_broker(tmp_path: Path) -> Any:
    """A broker whose consumer-group members heartbeat often and time out soon."""
    with running_broker(tmp_path / "data", f"group_consumer_heartbeat_interval_ms = {HEARTBEAT_MS}\n"
                        f"group_consumer_session_timeout_ms = {SESSION_MS}") as proc:
        yield proc


def member(address: str, group: str, topic: str) -> Any:
    c = Consumer({"bootstrap.servers": address, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    return c


def parts(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def poll_until(consumers: list[Any], done: Any, timeout: float = 30,
               sink: list[tuple[int, bytes]] | None = None) -> None:
    """Poll every consumer until `done()`; with `sink`, commit each message as it comes
    (synchronously) and record (consumer index, value). Checks at every round that no
    partition is assigned to two consumers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None and sink is not None:
                sink.append((i, msg.value()))
                c.commit(message=msg, asynchronous=False)
        held = [p for c in consumers for p in parts(c)]
        assert len(held) == len(set(held)), f"a partition assigned twice: {held}"
        if done():
            return
    raise AssertionError("timed out; assignments: " + repr([sorted(parts(c)) for c in consumers]))


def test_one_member_gets_all_commits_and_resumes(fast_broker: BrokerProcess,
                                                 topic_name: str) -> None:
    address, group = fast_broker.address, f"g-{topic_name}"
    create_topic(address, topic_name, 4)
    produce_all(address, topic_name, [(None, b"a%d" % i) for i in range(40)])
    first = member(address, group, topic_name)
    got = consume_n(first, 40)
    assert sorted(m.value() for m in got) == sorted(b"a%d" % i for i in range(40))
    assert parts(first) == {0, 1, 2, 3}
    first.commit(asynchronous=False)
    first.close()

    produce_all(address, topic_name, [(None, b"b%d" % i) for i in range(20)])
    second = member(address, group, topic_name)
    try:
        resumed = consume_n(second, 20)
        assert sorted(m.value() for m in resumed) == sorted(b"b%d" % i for i in range(20))
    finally:
        second.close()


def test_members_split_partitions_and_a_leaver_hands_them_over(fast_broker: BrokerProcess,
                                                               topic_name: str) -> None:
    address, group = fast_broker.address, f"g-{topic_name}"
    create_topic(address, topic_name, 6)
    produce_all(address, topic_name, [(f"k{i}".encode(), b"a%d" % i) for i in range(60)])
    consumers = [member(address, group, topic_name) for _ in range(3)]
    seen: list[tuple[int, bytes]] = []
    poll_until(consumers, lambda: all(len(parts(c)) == 2 for c in consumers), sink=seen)
    admin = AdminClient({"bootstrap.servers": address})
    described = admin.describe_consumer_groups([group])[group].result(20)  # ConsumerGroupDescribe
    assert (described.type.name, described.partition_assignor) == ("CONSUMER", "uniform")
    assert sorted(tp.partition for m in described.members
                  for tp in m.assignment.topic_partitions) == list(range(6))

    consumers[1].close()  # leaves: its partitions go to the others once it has let go
    rest = [consumers[0], consumers[2]]
    poll_until(rest, lambda: all(len(parts(c)) == 3 for c in rest), sink=seen)
    produce_all(address, topic_name, [(f"k{i}".encode(), b"b%d" % i) for i in range(60)])
    poll_until(rest, lambda: len(seen) >= 120, sink=seen)
    values = [v for _, v in seen]
    # every message once: committed progress neither lost nor repeated across the moves
    assert sorted(values) == sorted([b"a%d" % i for i in range(60)] + [b"b%d" % i for i in range(60)])
    for c in rest:
        c.close()


def test_a_killed_member_loses_its_partitions_after_the_session_timeout(
        fast_broker: BrokerProcess, topic_name: str) -> None:
    address, group = fast_broker.address, f"g-{topic_name}"
    create_topic(address, topic_name, 4)
    script = textwrap.dedent(f"""
        from confluent_kafka import Consumer
        c = Consumer({{"bootstrap.servers": {address!r}, "group.id": {group!r},
                      "group.protocol": "consumer"}})
        c.subscribe([{topic_name!r}])
        told = False
        while True:
            c.poll(0.05)
            if c.assignment() and not told:
                print("ASSIGNED", flush=True)
                told = True
    """)
    doomed = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    survivor = None
    try:
        assert doomed.stdout is not None and doomed.stdout.readline().strip() == "ASSIGNED"
        survivor = member(address, group, topic_name)
        poll_until([survivor], lambda: len(parts(survivor)) == 2)
        doomed.kill()  # no leave heartbeat: only the session timeout frees its partitions
        doomed.wait(10)
        killed_at = time.monotonic()
        poll_until([survivor], lambda: len(parts(survivor)) == 4, timeout=SESSION_MS / 1000 + 20)
        assert time.monotonic() - killed_at >= (SESSION_MS - 2 * HEARTBEAT_MS) / 1000
    finally:
        if doomed.poll() is None:
            doomed.kill()
        if survivor is not None:
            survivor.close()


def test_a_regex_subscription_follows_new_topics(fast_broker: BrokerProcess,
                                                 topic_name: str) -> None:
    address = fast_broker.address
    for suffix in ("a", "b"):
        create_topic(address, f"{topic_name}-{suffix}", 1)
        produce_all(address, f"{topic_name}-{suffix}", [(None, suffix.encode())])
    consumer = member(address, f"g-{topic_name}", f"^{topic_name}-.*")
    try:
        assert sorted(m.value() for m in consume_n(consumer, 2)) == [b"a", b"b"]
        create_topic(address, f"{topic_name}-c", 1)  # matched by the broker at a heartbeat
        produce_all(address, f"{topic_name}-c", [(None, b"c")])
        assert [m.value() for m in consume_n(consumer, 1)] == [b"c"]
    finally:
        consumer.close()


def test_classic_and_consumer_groups_coexist(fast_broker: BrokerProcess, topic_name: str) -> None:
    address = fast_broker.address
    create_topic(address, topic_name, 2)
    produce_all(address, topic_name, [(None, b"v%d" % i) for i in range(20)])
    suffix = uuid.uuid4().hex[:6]
    classic = new_consumer(address, f"classic-{suffix}")
    classic.subscribe([topic_name])
    modern = member(address, f"modern-{suffix}", topic_name)
    intruder = None
    try:
        assert len(consume_n(classic, 20)) == 20
        assert len(consume_n(modern, 20)) == 20
        admin = AdminClient({"bootstrap.servers": address})
        groups = admin.list_consumer_groups().result(20)
        kinds = {g.group_id: g.type.name for g in groups.valid}
        assert kinds[f"classic-{suffix}"] == "CLASSIC" and kinds[f"modern-{suffix}"] == "CONSUMER"

        # a classic member cannot join the live consumer group
        intruder = new_consumer(address, f"modern-{suffix}")
        intruder.subscribe([topic_name])
        deadline = time.monotonic() + 20
        error = None
        while error is None and time.monotonic() < deadline:
            msg = intruder.poll(0.1)
            modern.poll(0)
            if msg is not None and msg.error() is not None:
                error = msg.error().code()
        assert error == KafkaError.INCONSISTENT_GROUP_PROTOCOL
    finally:
        for c in (classic, modern, intruder):
            if c is not None:
                c.close()
