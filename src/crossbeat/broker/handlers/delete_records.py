"""DeleteRecords (21): move partitions' log start offsets (low watermarks) forward.

Offset -1 means the high watermark. An offset past the high watermark, or another negative
one, is OFFSET_OUT_OF_RANGE; one below the current start changes nothing. Each partition
answers its low watermark afterwards (-1 on error). The new start is durable before the
answer, Fetch below it answers OFFSET_OUT_OF_RANGE and ListOffsets earliest returns it;
whole segments below it are deleted at once (`Stream.delete_before`). A start the disk
refuses to record is KAFKA_STORAGE_ERROR for that partition, as Kafka answers for a failed
log directory, and leaves it where it was. A topic whose cleanup.policy lacks `delete` (a
compact-only one) is POLICY_VIOLATION, as in Kafka: its records go only by compaction. The
single replica is always in sync, so the request's timeout is never waited on.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.admin import DeleteRecordsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topic_configs import deletes
from crossbeat.stream.errors import OffsetOutOfRange, StreamError

log = logging.getLogger(__name__)

_Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
_Partition = _Topic.DeleteRecordsPartitionResult
HIGH_WATERMARK = -1


async def handle(ctx: Context, req: Any) -> Any:
    topics = ctx.broker.topics
    out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            stream = topics.partition(t.name, p.partition_index)
            topic = topics.get(t.name)
            code, low = ErrorCode.NONE, -1
            if stream is None or topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not deletes(topic.configs):
                code = ErrorCode.POLICY_VIOLATION
            else:
                offset = stream.end_offset if p.offset == HIGH_WATERMARK else p.offset
                try:
                    if offset < 0:
                        raise OffsetOutOfRange(f"offset {offset} is not valid",
                                               start_offset=stream.start_offset,
                                               end_offset=stream.end_offset)
                    low = await stream.delete_before(offset)
                except OffsetOutOfRange:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                except StreamError:  # deleted meanwhile, or the store failed
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                except OSError as exc:  # the placement write was refused (a full disk)
                    log.error("could not delete records of %s-%d: %s", t.name,
                              p.partition_index, exc)
                    code = ErrorCode.KAFKA_STORAGE_ERROR
            parts.append(_Partition(partition_index=p.partition_index, low_watermark=low,
                                    error_code=int(code)))
        out.append(_Topic(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=out)
