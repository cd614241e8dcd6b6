"""OffsetCommit (8): fence by group generation, then make the offsets durable (fsync)
before answering. Leader epoch and metadata are stored and returned by OffsetFetch.
v7+ carries the static instance id, by which a replaced member is FENCED_INSTANCE_ID.
In a KIP-848 consumer group the generation is the member epoch (v9+): a stale one is
STALE_MEMBER_EPOCH, as GroupCoordinator.check_commit says."""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.consumer import OffsetCommitResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.offsets import Entry

log = logging.getLogger(__name__)

_Topic = OffsetCommitResponse.OffsetCommitResponseTopic
_Partition = _Topic.OffsetCommitResponsePartition
MAX_METADATA = 4096
OFFSET_METADATA_TOO_LARGE = 12


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    instance = req.group_instance_id if ctx.version >= 7 else None
    group_error = ErrorCode.INVALID_GROUP_ID if not req.group_id else broker.groups.check_commit(
        req.group_id, req.generation_id_or_member_epoch, req.member_id, instance, ctx.version)
    results: list[tuple[str, list[tuple[int, int]]]] = []
    entries: list[Entry] = []
    for topic in req.topics:
        parts: list[tuple[int, int]] = []
        for p in topic.partitions:
            code = int(group_error)
            if not code:
                if broker.topics.partition(topic.name, p.partition_index) is None:
                    code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif p.committed_metadata is not None and len(p.committed_metadata) > MAX_METADATA:
                    code = OFFSET_METADATA_TOO_LARGE
                else:
                    epoch = p.committed_leader_epoch if ctx.version >= 6 else -1
                    entries.append((topic.name, p.partition_index, p.committed_offset, epoch,
                                    p.committed_metadata))
            parts.append((p.partition_index, code))
        results.append((topic.name, parts))
    if entries:
        try:
            await broker.offsets.commit(req.group_id, entries)
        except OSError as exc:
            log.error("group %s: offset commit failed: %s", req.group_id, exc)
            # Kafka's answer when the offsets log cannot be written (a storage error):
            # NOT_COORDINATOR, which clients retry after looking the coordinator up again.
            results = [(t, [(i, code or int(ErrorCode.NOT_COORDINATOR)) for i, code in ps])
                       for t, ps in results]
    return OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[_Topic(name=t, partitions=[_Partition(partition_index=i, error_code=c)
                                           for i, c in ps]) for t, ps in results],
    )
