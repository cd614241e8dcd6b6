"""ListOffsets (2): earliest (-2), latest (-1) or the first offset at or after a timestamp.

By timestamp: the store finds the first batch whose maxTimestamp >= the target; the
answer is refined to the first record of that batch with timestamp >= target, as Kafka
does. No such record: offset -1, timestamp -1. With isolation_level 1 (read_committed,
v2+) latest is the last stable offset (`crossbeat.broker.partition_txns`).
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.consumer import ListOffsetsResponse
from kafka.record.default_records import DefaultRecordBatch

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import leader_epoch
from crossbeat.stream import Stream
from crossbeat.stream.errors import StreamError

log = logging.getLogger(__name__)

_Topic = ListOffsetsResponse.ListOffsetsTopicResponse
_Partition = _Topic.ListOffsetsPartitionResponse
LATEST, EARLIEST = -1, -2


def _by_timestamp(stream: Stream, ts: int) -> tuple[int, int]:
    found = stream.offset_for_timestamp(ts)
    if found is None:
        return -1, -1
    offset, batch_max_ts = found
    try:
        chunks = stream.read(offset, 1)
        if chunks:
            batch = DefaultRecordBatch(bytes(chunks[0]))
            if batch.timestamp_type == 0:  # CreateTime: per-record timestamps
                for record in batch:
                    if record.offset >= offset and record.timestamp >= ts:
                        return record.offset, record.timestamp
    except Exception as exc:  # noqa: BLE001 - fall back to the batch-level answer
        log.debug("timestamp refinement in %s failed: %s", stream.name, exc)
    return offset, batch_max_ts


async def handle(ctx: Context, req: Any) -> Any:
    topics = ctx.broker.topics
    committed_only = ctx.version >= 2 and req.isolation_level == 1
    out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            stream = topics.partition(t.name, p.partition_index)
            code, offset, ts, epoch = ErrorCode.NONE, -1, -1, -1
            if stream is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                epoch = leader_epoch(stream)
                try:
                    if p.timestamp == LATEST and committed_only:
                        await ctx.broker.partition_txns.ensure(stream)  # built off the loop
                        offset = ctx.broker.partition_txns.last_stable_offset(stream)
                    elif p.timestamp == LATEST:
                        offset = stream.end_offset
                    elif p.timestamp == EARLIEST:
                        offset = stream.start_offset
                    elif p.timestamp >= 0:
                        offset, ts = _by_timestamp(stream, p.timestamp)
                    else:
                        code = ErrorCode.INVALID_REQUEST
                except StreamError:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            parts.append(_Partition(partition_index=p.partition_index, error_code=int(code),
                                    timestamp=ts, offset=offset, leader_epoch=epoch))
        out.append(_Topic(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=out)
