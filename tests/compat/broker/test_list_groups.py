"""ListGroups v4 (states filter, each group's state) and the protocol type of emptied
groups, with confluent-kafka's and kafka-python's admin clients."""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from tests.compat.broker.helpers import (
    BrokerProcess,
    assigned_member,
    consume_commit_and_leave,
    produce_all,
)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def test_list_groups_states_and_filter(broker: BrokerProcess, topic_name: str) -> None:
    from kafka import KafkaAdminClient

    produce_all(broker.address, topic_name, [(None, b"m")], acks="all")
    done, live = f"done-{topic_name}", f"live-{topic_name}"
    consume_commit_and_leave(broker.address, done, topic_name, 1)  # Empty, but a consumer group
    member = assigned_member(broker.address, live, topic_name)
    try:
        admin = AdminClient({"bootstrap.servers": broker.address})
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(20).valid}
        assert {g: listed[g].state for g in (done, live)} == {
            done: ConsumerGroupState.EMPTY, live: ConsumerGroupState.STABLE}
        assert not listed[done].is_simple_consumer_group
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(20)
        assert [g.group_id for g in stable.valid] == [live]
        described = admin.describe_consumer_groups([done])[done].result(20)
        assert described.state == ConsumerGroupState.EMPTY
        assert not described.is_simple_consumer_group  # protocol type 'consumer' kept

        kp = KafkaAdminClient(bootstrap_servers=broker.address)
        try:
            empty = kp.list_groups(states_filter=["Empty"])
            assert [(g["group_id"], g["protocol_type"], g["group_state"]) for g in empty] == [
                (done, "consumer", "Empty")]
            assert kp.describe_groups([done])[done]["protocol_type"] == "consumer"
        finally:
            kp.close()
    finally:
        member.close()
