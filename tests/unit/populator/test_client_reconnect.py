"""A broker that is down costs each of crossbeat's Kafka clients about one log line a
second, not twenty: librdkafka logs every refused connection (on stderr) and, left to its
100 ms default, retries at a steady 50 ms."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from crossbeat.populator.lease import GroupLease
from crossbeat.populator.publisher import Publisher
from crossbeat.spark.kafka_client import consumer

SCENARIO_S = 4.0  # how long the broker is down: the time the test observes, not a wait for an event


def refused_address() -> str:
    with socket.socket() as s:  # bound, never listening, then closed: connections are refused
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("make", [
    lambda brokers: consumer(brokers, "g"),
    lambda brokers: Publisher(brokers),
    lambda brokers: GroupLease(brokers, "g", "lease"),
], ids=["spark-source-consumer", "publisher", "lease"])
def test_a_down_broker_costs_a_client_about_a_log_line_a_second(
    make: Callable[[str], Any], capfd: pytest.CaptureFixture[str],
) -> None:
    client = make(refused_address())
    try:
        time.sleep(SCENARIO_S)
        refused = [line for line in capfd.readouterr().err.splitlines() if "Connection refused" in line]
    finally:
        close = getattr(client, "close", None)
        if close is not None:
            close()
    assert refused, "librdkafka logged no refused connection: the test observes nothing"
    assert len(refused) <= 2 * SCENARIO_S, f"{len(refused)} lines in {SCENARIO_S} s"
