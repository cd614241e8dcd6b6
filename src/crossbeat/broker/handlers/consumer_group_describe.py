"""ConsumerGroupDescribe (69): KIP-848 consumer groups as admin tools see them: state,
group and assignment epochs, assignor, and each member with its subscription, current
assignment and target. An empty id is INVALID_GROUP_ID; an id that names no consumer group
(unknown, or a classic group) is GROUP_ID_NOT_FOUND, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.groups.assignors import DEFAULT_ASSIGNOR, Assignment
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.schemas import ConsumerGroupDescribeResponse
from crossbeat.broker.topics import Topics

_Group = ConsumerGroupDescribeResponse.DescribedGroup
_Member = _Group.Member
_Assignment = _Member.Assignment
_TopicPartitions = _Assignment.TopicPartitions


def _assignment(topics: Topics, assignment: Assignment) -> Any:
    by_topic: dict[str, list[int]] = {}
    for name, partition in sorted(assignment):
        by_topic.setdefault(name, []).append(partition)
    return _Assignment(topic_partitions=[
        _TopicPartitions(topic_id=t.topic_id, topic_name=name, partitions=parts)
        for name, parts in by_topic.items() if (t := topics.get(name)) is not None
    ])


def _error(group_id: str, code: ErrorCode, message: str) -> Any:
    return _Group(error_code=int(code), error_message=message, group_id=group_id,
                  group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                  members=[])


async def handle(ctx: Context, req: Any) -> Any:
    coordinator = ctx.broker.groups
    topics = ctx.broker.topics
    out = []
    for group_id in req.group_ids:
        group = coordinator.consumer.groups.get(group_id)
        if not group_id:
            out.append(_error(group_id, ErrorCode.INVALID_GROUP_ID, "Group id is empty."))
            continue
        if group is None:
            what = "is not a consumer group" if group_id in coordinator.groups else "not found"
            out.append(_error(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} {what}."))
            continue
        members = [
            _Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                    member_epoch=m.member_epoch, client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=sorted(m.subscribed_names),
                    subscribed_topic_regex=m.subscribed_regex,
                    assignment=_assignment(topics, m.assigned),
                    target_assignment=_assignment(topics, group.target.get(m.member_id,
                                                                           frozenset())))
            for m in group.members.values()
        ]
        out.append(_Group(error_code=0, error_message=None, group_id=group_id,
                          group_state=group.state, group_epoch=group.group_epoch,
                          assignment_epoch=group.assignment_epoch,
                          assignor_name=group.assignor or DEFAULT_ASSIGNOR, members=members))
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=out)
