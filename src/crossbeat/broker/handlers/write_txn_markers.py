"""WriteTxnMarkers (27), v0-v2: write the marker that ends a producer's transaction on the
partitions named. A transaction coordinator sends it to partition leaders; admin tools send
it to abort a hanging transaction (KIP-664: `kafka-transactions.sh abort`, kafka-python's
`abort_transaction`). A transaction hangs when its coordinator has lost it (its state
damaged at rest) while a partition still holds its records open: that partition's last
stable offset, and every read_committed consumer, stay there until a marker ends it.

Per partition, as Kafka's leader answers: UNKNOWN_TOPIC_OR_PARTITION for a partition this
broker does not have; INVALID_PRODUCER_EPOCH when the producer has a newer epoch there (a
bump or a fence: the marker names a transaction that is over); KAFKA_STORAGE_ERROR when
the log cannot take the marker. A partition where the producer has no open transaction
is answered NONE and gets no marker: there is nothing to end (Kafka appends one anyway).
The coordinator epoch is not checked: this broker's markers carry none (DescribeProducers
reports -1) and admin aborts send -1 or 0.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.producer.transaction import WriteTxnMarkersResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.txn_coordinator import write_marker
from crossbeat.stream.errors import StreamError

log = logging.getLogger(__name__)

_Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
_Topic = _Result.WritableTxnMarkerTopicResult
_Partition = _Topic.WritableTxnMarkerPartitionResult


async def _end(ctx: Context, topic: str, index: int, pid: int, epoch: int, commit: bool) -> ErrorCode:
    broker = ctx.broker
    stream = broker.topics.partition(topic, index)
    if stream is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    try:
        await broker.partition_txns.ensure(stream)
        current = {p.producer_id: p.epoch for p in broker.producers.active(stream)}
        if current.get(pid, epoch) > epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if pid not in broker.partition_txns.get(stream).open:
            return ErrorCode.NONE
        offset = await write_marker(broker, topic, index, pid, epoch, commit)
    except (OSError, StreamError) as exc:
        log.error("%s-%d: cannot write the %s marker of producer %d: %s", topic, index,
                  "commit" if commit else "abort", pid, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR
    if offset is None:  # deleted meanwhile
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    log.warning("%s-%d: transaction of producer %d (epoch %d) ended by a WriteTxnMarkers %s "
                "at offset %d (from %s)", topic, index, pid, epoch,
                "COMMIT" if commit else "ABORT", offset, ctx.client_id or ctx.client_host)
    return ErrorCode.NONE


async def handle(ctx: Context, req: Any) -> Any:
    results = []
    for marker in req.markers:
        commit = bool(marker.transaction_result)
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                code = await _end(ctx, topic.name, index, marker.producer_id,
                                  marker.producer_epoch, commit)
                partitions.append(_Partition(partition_index=index, error_code=int(code)))
            topics.append(_Topic(name=topic.name, partitions=partitions))
        results.append(_Result(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)
