"""CreateTopics validation against `crossbeat broker`, compared with what Apache Kafka answers.

kafka-python's admin client is used where librdkafka would refuse the request itself
(duplicate names) and because it hands back the broker's error code and message as sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.compat.broker.helpers import BrokerProcess

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

INVALID_REQUEST = 42


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[Any]:
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        yield client
    finally:
        client.close()


def create(admin: Any, *topics: Any) -> list[tuple[str, int, str | None]]:
    """Send one CreateTopics request; (name, error code, message) per result, in order."""
    response = admin.create_topics(list(topics), raise_errors=False)
    return [(t["name"], t["error_code"], t["error_message"]) for t in response["topics"]]


def test_same_topic_twice_in_one_request_is_invalid_and_not_created(admin: Any) -> None:
    from kafka.admin import NewTopic

    results = create(admin, NewTopic("twice", 1, 1), NewTopic("twice", 2, 1),
                     NewTopic("once", 1, 1))
    assert results == [("twice", INVALID_REQUEST, "Duplicate topic name."), ("once", 0, None)]
    assert sorted(admin.list_topics()) == ["once"]
