"""CreatePartitions (37): grow a topic's partition count, never shrink it
(INVALID_PARTITIONS); `validate_only` creates nothing.

A manual assignment, when given, must name one replica list per new partition, each
exactly this broker (the topic's replication factor is 1), checked with the messages of
Kafka's controller. A topic named twice in one request gets INVALID_REQUEST for each copy
and is not grown. Consumer groups see the new partitions through metadata: classic members
rejoin when their client's metadata refresh notices them, KIP-848 groups get a new target
assignment at the next heartbeat (the group's subscribed-topic metadata changed).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import CreatePartitionsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import TopicError

_Result = CreatePartitionsResponse.CreatePartitionsTopicResult


def check_assignments(assignments: list[Any] | None, additional: int, node_id: int) -> None:
    """Raise TopicError(INVALID_REPLICA_ASSIGNMENT) unless `assignments` is None or gives
    `additional` replica lists of exactly [node_id]."""
    if assignments is None:
        return
    if len(assignments) != additional:
        raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"Attempted to add {additional} additional partition(s), but only "
                         f"{len(assignments)} assignment(s) were specified.")
    for a in assignments:
        replicas = list(a.broker_ids)
        if not replicas:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "The manual partition assignment includes an empty replica list.")
        for broker in replicas:
            if broker != node_id:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"The manual partition assignment includes broker {broker}, "
                                 "but no such broker is registered.")
        if len(replicas) != 1:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"The manual partition assignment includes the broker {node_id} "
                             "more than once.")


async def handle(ctx: Context, req: Any) -> Any:
    topics = ctx.broker.topics
    counts = Counter(t.name for t in req.topics)
    results = []
    for t in req.topics:
        code, message = ErrorCode.NONE, None
        try:
            if counts[t.name] > 1:
                raise TopicError(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
            topic = topics.get(t.name)
            if topic is not None and t.count > len(topic.partitions):
                check_assignments(t.assignments, t.count - len(topic.partitions),
                                  ctx.broker.node_id)
            topics.add_partitions(t.name, t.count, validate_only=bool(req.validate_only))
        except TopicError as exc:
            code, message = exc.code, exc.message
        results.append(_Result(name=t.name, error_code=int(code), error_message=message))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
