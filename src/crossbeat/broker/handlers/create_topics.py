"""CreateTopics (19): replication factor must be 1 or -1 (single node); configs are
checked against what the store honours; `validate_only` creates nothing.

A name given more than once in one request is not created: it gets one result,
INVALID_REQUEST, as in Kafka (whose response has one entry per name)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import CreateTopicsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import TopicError

_Result = CreateTopicsResponse.CreatableTopicResult


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
                                   error_message="Duplicate topic name."))
            continue
        code, message = ErrorCode.NONE, None
        try:
            if t.replication_factor not in (-1, 1):
                raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"replication factor {t.replication_factor} > 1 broker")
            if t.assignments:
                for a in t.assignments:
                    if list(a.broker_ids) != [ctx.broker.node_id]:
                        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                         f"replica assignment {list(a.broker_ids)} names "
                                         f"brokers other than {ctx.broker.node_id}")
                count = len(t.assignments)
            else:
                count = t.num_partitions if t.num_partitions != -1 else ctx.broker.settings.num_partitions
            configs = {c.name: c.value for c in t.configs or [] if c.value is not None}
            topics.create(t.name, count, configs, validate_only=bool(req.validate_only))
        except TopicError as exc:
            code, message = exc.code, exc.message
        results.append(_Result(name=t.name, error_code=int(code), error_message=message))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
