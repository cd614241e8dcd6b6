"""ConsumerGroupHeartbeat (68): the KIP-848 consumer group protocol; see
crossbeat.broker.groups.consumer_coordinator. Topics travel by id on the wire and by name
inside; owned partitions of topics no longer known are dropped (they cannot be assigned).
v0 joins with an empty member id get one from us; v1 members bring their own (KIP-1082).
"""

from __future__ import annotations

from typing import Any

from crossbeat.broker.groups.assignors import Assignment
from crossbeat.broker.groups.consumer_coordinator import ConsumerGroupCoordinator, Heartbeat
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.schemas import ConsumerGroupHeartbeatResponse

_Assignment = ConsumerGroupHeartbeatResponse.Assignment
_TopicPartitions = _Assignment.TopicPartitions


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    owned: Assignment | None = None
    if req.topic_partitions is not None:
        found = ((broker.topics.by_id(tp.topic_id), tp.partitions) for tp in req.topic_partitions)
        owned = frozenset((t.name, p) for t, parts in found if t is not None for p in parts)
    member_id = req.member_id
    if not member_id and ctx.version == 0 and req.member_epoch == 0:
        member_id = ConsumerGroupCoordinator.new_member_id()
    coordinator = broker.groups.consumer
    result = coordinator.heartbeat(Heartbeat(
        group_id=req.group_id, member_id=member_id, member_epoch=req.member_epoch,
        instance_id=req.instance_id, rack_id=req.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_names=req.subscribed_topic_names,
        subscribed_regex=req.subscribed_topic_regex if ctx.version >= 1 else None,
        server_assignor=req.server_assignor, owned=owned,
        client_id=ctx.client_id or "", client_host=ctx.client_host,
    ), broker.topics.partition_counts())
    assignment = None
    if result.assignment is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(result.assignment):
            by_topic.setdefault(topic, []).append(partition)
        assignment = _Assignment(topic_partitions=[
            _TopicPartitions(topic_id=t.topic_id, partitions=parts)
            for name, parts in by_topic.items() if (t := broker.topics.get(name)) is not None
        ])
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=int(result.error), error_message=result.message,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=coordinator.heartbeat_interval_ms, assignment=assignment,
    )
