"""CreateTopics (19): replication factor must be 1 or -1 (single node); configs are
checked against what the store honours; `validate_only` creates nothing.

A name given more than once in one request is not created: it gets one result,
INVALID_REQUEST, as in Kafka (whose response has one entry per name). A manual replica
assignment is checked as Kafka's controller does (see `assigned_partitions`); it gives the
partition count and replication factor, so a request that also sets either (other than -1)
is INVALID_REQUEST with the controller's message, and nothing is created.

v5+ (flexible) results carry what the topic was (or, with `validate_only`, would be)
created with: its partition count, replication factor 1 and every config with its value
and source, as DescribeConfigs reports them; v7 adds the topic id. A topic that was not
created has -1 for both counts and no configs, as in Kafka."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from kafka.protocol.admin import CreateTopicsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.handlers.describe_configs import topic_configs
from crossbeat.broker.topics import TopicError, check_configs, topic_id

_Result = CreateTopicsResponse.CreatableTopicResult
_TopicConfig = _Result.CreatableTopicConfigs
_NO_ID = uuid.UUID(int=0)


def _bad_assignment(message: str) -> TopicError:
    return TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


def assigned_partitions(assignments: list[Any], brokers: set[int]) -> int:
    """The partition count a manual replica assignment gives; raises
    TopicError(INVALID_REPLICA_ASSIGNMENT) with the message Kafka's controller sends for an
    index given twice, an empty replica list, a broker not in `brokers`, a broker listed
    twice in one partition, differing replica counts, or indexes that are not 0..n-1."""
    seen: set[int] = set()
    replication: int | None = None
    for a in assignments:
        if a.partition_index in seen:
            raise _bad_assignment("Found multiple manual partition assignments for partition "
                                  f"{a.partition_index}")
        seen.add(a.partition_index)
        replicas = sorted(a.broker_ids)
        if not replicas:
            raise _bad_assignment("The manual partition assignment includes an empty replica list.")
        for previous, broker in zip([None, *replicas], replicas, strict=False):
            if broker not in brokers:
                raise _bad_assignment(f"The manual partition assignment includes broker {broker}, "
                                      "but no such broker is registered.")
            if broker == previous:
                raise _bad_assignment(f"The manual partition assignment includes the broker "
                                      f"{broker} more than once.")
        if replication is not None and len(replicas) != replication:
            raise _bad_assignment(
                f"The manual partition assignment includes a partition with {len(replicas)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{replication} replica(s).")
        replication = len(replicas)
    if seen != set(range(len(seen))):
        raise _bad_assignment("partitions should be a consecutive 0-based integer sequence")
    return len(seen)


def _check_assignment_alone(topic: Any) -> None:
    """Raise TopicError(INVALID_REQUEST) as Kafka's controller does when a topic with a manual
    replica assignment also sets a replication factor or partition count (in its order)."""
    for value, what in ((topic.replication_factor, "replication factor"),
                        (topic.num_partitions, "numPartitions")):
        if value != -1:
            raise TopicError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was "
                             f"specified, but {what} was not -1.")


async def handle(ctx: Context, req: Any) -> Any:
    topics = ctx.broker.topics
    counts = Counter(t.name for t in req.topics)
    results = []
    answered: set[str] = set()
    for t in req.topics:
        if t.name in answered:
            continue
        answered.add(t.name)
        if counts[t.name] > 1:
            results.append(_Result(name=t.name, error_code=int(ErrorCode.INVALID_REQUEST),
                                   error_message="Duplicate topic name.", topic_id=_NO_ID,
                                   num_partitions=-1, replication_factor=-1, configs=[]))
            continue
        try:
            if t.assignments:
                _check_assignment_alone(t)
            if t.replication_factor not in (-1, 1):
                raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"replication factor {t.replication_factor} > 1 broker")
            if t.assignments:
                count = assigned_partitions(t.assignments, {ctx.broker.node_id})
            else:
                count = t.num_partitions if t.num_partitions != -1 else ctx.broker.settings.num_partitions
            configs = {c.name: c.value for c in t.configs or [] if c.value is not None}
            created = topics.create(t.name, count, configs, validate_only=bool(req.validate_only))
        except TopicError as exc:
            results.append(_Result(name=t.name, error_code=int(exc.code), error_message=exc.message,
                                   topic_id=_NO_ID, num_partitions=-1, replication_factor=-1,
                                   configs=[]))
            continue
        # what the topic got: its configs as stored (checked, Kafka's spelling)
        kept = created.configs if created is not None else check_configs(configs)
        results.append(_Result(
            name=t.name, error_code=0, error_message=None,
            topic_id=topic_id(t.name), num_partitions=count,
            replication_factor=1,
            configs=[_TopicConfig(name=c.name, value=c.value, read_only=False,
                                  config_source=c.source, is_sensitive=False)
                     for c in topic_configs(ctx.broker.settings, kept)]))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
