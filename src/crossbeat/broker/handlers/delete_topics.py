"""DeleteTopics (20): remove topics, their streams, producer state and committed offsets.

A topic the disk refuses to delete (KAFKA_STORAGE_ERROR) keeps all of these."""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.admin import DeleteTopicsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import TopicError, stream_name

log = logging.getLogger(__name__)

_Result = DeleteTopicsResponse.DeletableTopicResult


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    results = []
    deleted: list[str] = []
    for name in req.topic_names:
        code = ErrorCode.NONE
        topic = broker.topics.get(name)
        try:
            broker.topics.delete(name)
        except TopicError as exc:
            code = exc.code
        if topic is not None and code == ErrorCode.NONE:
            deleted.append(name)
            for index in range(len(topic.partitions)):
                broker.producers.forget(stream_name(name, index))
                broker.partition_txns.forget(stream_name(name, index))
        results.append(_Result(name=name, error_code=int(code)))
    for name in deleted:
        for group, entries in broker.offsets.forget_topic(name):
            try:
                await broker.offsets.commit(group, entries)
            except OSError as exc:
                log.error("could not drop offsets of deleted topic %s: %s", name, exc)
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
