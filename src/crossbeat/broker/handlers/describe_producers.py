"""DescribeProducers (61), v0 (KIP-664): for each requested partition, the idempotent and
transactional producers it remembers (`ProducerStates.active`; a partition's state is
loaded from its snapshot and log if nothing loaded it yet), each with its epoch, the last
sequence of its newest batch there (-1 if none, as after an epoch bump), the max timestamp
of that batch (Kafka's lastTimestamp; a marker's time after a marker), coordinator epoch -1
(markers carry none here), and the first offset of its transaction open there (from the
partition's transaction index, -1 if none; an index not built yet has no open transaction,
since the produce path builds it before a transactional batch is written, and the
coordinator builds those of the transactions it keeps across a restart).

As Kafka's broker answers: an illegal topic name is INVALID_TOPIC_EXCEPTION and a topic
that does not exist UNKNOWN_TOPIC_OR_PARTITION ("This server does not host this
topic-partition.") for each of its requested partitions; a partition the topic lacks is
UNKNOWN_TOPIC_OR_PARTITION without a message; a log that cannot be read is
KAFKA_STORAGE_ERROR."""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.admin import DescribeProducersResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import TopicError, check_topic_name
from crossbeat.stream import Stream
from crossbeat.stream.errors import StreamError

log = logging.getLogger(__name__)

_Topic = DescribeProducersResponse.TopicResponse
_Partition = _Topic.PartitionResponse
_Producer = _Partition.ProducerState
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


def _describe(ctx: Context, stream: Stream, index: int) -> Any:
    broker = ctx.broker
    try:
        producers = broker.producers.active(stream)
    except StreamError as exc:
        log.error("cannot describe the producers of %s: %s", stream.name, exc)
        return _Partition(partition_index=index, error_code=int(ErrorCode.KAFKA_STORAGE_ERROR),
                          error_message=str(exc), active_producers=[])
    txns = broker.partition_txns.peek(stream.name)
    open_txns = txns.open if txns is not None else {}
    return _Partition(partition_index=index, error_code=0, error_message=None, active_producers=[
        _Producer(producer_id=p.producer_id, producer_epoch=p.epoch,
                  last_sequence=p.last_sequence, last_timestamp=p.last_timestamp,
                  coordinator_epoch=-1,
                  current_txn_start_offset=open_txns.get(p.producer_id, -1))
        for p in producers])


def _topic(ctx: Context, name: str, indexes: list[int]) -> Any:
    code, message = ErrorCode.NONE, None
    try:
        check_topic_name(name)
    except TopicError as exc:
        code, message = exc.code, exc.message
    else:
        if ctx.broker.topics.get(name) is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_MESSAGE
    partitions = []
    for index in indexes:
        stream = ctx.broker.topics.partition(name, index) if not code else None
        if stream is not None:
            partitions.append(_describe(ctx, stream, index))
        else:
            partitions.append(_Partition(
                partition_index=index, active_producers=[],
                error_code=int(code or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                error_message=message))
    return _Topic(name=name, partitions=partitions)


async def handle(ctx: Context, req: Any) -> Any:
    return DescribeProducersResponse(
        throttle_time_ms=0,
        topics=[_topic(ctx, t.name, t.partition_indexes) for t in req.topics])
