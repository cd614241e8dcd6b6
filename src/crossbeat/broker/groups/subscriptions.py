"""Which topics a group's live members subscribe to: what OffsetDelete may not touch.

Kafka refuses to delete a group's offsets of a topic a live member subscribes to
(GROUP_SUBSCRIBED_TO_TOPIC), since the member would commit them again or lose its place.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka.protocol.consumer import ConsumerProtocolSubscription

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.groups.consumer_coordinator import ConsumerGroupCoordinator
from crossbeat.broker.groups.coordinator import GroupCoordinator
from crossbeat.broker.groups.state import Group, GroupState

CONSUMER_PROTOCOL_TYPE = "consumer"


def _classic_topics(group: Group) -> frozenset[str]:
    """Topics named in the members' consumer-protocol subscriptions: the chosen protocol's
    metadata once there is one, else every protocol's (more than Kafka counts, so never
    less). Unparsable metadata names nothing, as in Kafka."""
    topics: set[str] = set()
    for member in group.members.values():
        for name, metadata in member.protocols:
            if group.protocol_name is not None and name != group.protocol_name:
                continue
            try:
                topics.update(ConsumerProtocolSubscription.decode(metadata).topics or ())
            except Exception:  # noqa: BLE001 - a client's opaque bytes; Kafka ignores them too
                continue
    return frozenset(topics)


def offset_delete_scope(groups: GroupCoordinator, group_id: str, partition_counts: Mapping[str, int],
                        *, has_offsets: bool) -> tuple[ErrorCode, frozenset[str]]:
    """(error, subscribed topics) for an OffsetDelete of `group_id`, as Kafka's group
    coordinator decides it (`validateOffsetDelete`, `isSubscribedToTopic`).

    A KIP-848 group: NONE and its members' subscriptions (regexes resolved against the
    existing topics). A classic group: NONE and no topics when Empty; with members, NONE
    and their subscriptions if its protocol type is "consumer", else NON_EMPTY_GROUP. A
    group known only from its committed offsets (`has_offsets`) is Empty; one not known at
    all is GROUP_ID_NOT_FOUND.
    """
    consumer_group = groups.consumer.groups.get(group_id)
    if consumer_group is not None:
        subscribed = frozenset().union(*(
            ConsumerGroupCoordinator._subscribed(m, partition_counts)
            for m in consumer_group.members.values()))
        return ErrorCode.NONE, subscribed
    group = groups.groups.get(group_id)
    if group is None:
        return (ErrorCode.NONE if has_offsets else ErrorCode.GROUP_ID_NOT_FOUND), frozenset()
    if group.state is GroupState.EMPTY:
        return ErrorCode.NONE, frozenset()
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return ErrorCode.NON_EMPTY_GROUP, frozenset()
    return ErrorCode.NONE, _classic_topics(group)
