"""DescribeLogDirs (35), v1-v5: the broker's one log directory, its stream store
(`<data_dir>/streams`, as an absolute path), with the size in bytes of each requested
partition (null topics: every partition of every topic), offset lag 0 and never a future
log (there is no AlterReplicaLogDirs). Topics and partitions that do not exist are left
out, and so is a topic none of whose requested partitions exists, as Kafka's
ReplicaManager answers; the error codes are NONE (KAFKA_STORAGE_ERROR for the directory
when its file system cannot be queried). v4+ add the total and usable bytes of the
directory's file system (what Java's FileStore reports: statvfs blocks and blocks
available to unprivileged users, times the fragment size); v5's directory is never
cordoned."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from kafka.protocol.admin import DescribeLogDirsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import Topic

log = logging.getLogger(__name__)

_Result = DescribeLogDirsResponse.DescribeLogDirsResult
_Topic = _Result.DescribeLogDirsTopic
_Partition = _Topic.DescribeLogDirsPartition
_LONG_MAX = 2**63 - 1


def _space(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding `path`."""
    st = os.statvfs(path)
    return min(st.f_blocks * st.f_frsize, _LONG_MAX), min(st.f_bavail * st.f_frsize, _LONG_MAX)


def _wanted(ctx: Context, req: Any) -> list[tuple[Topic, list[int]]]:
    """The existing topics asked for, each with its existing partitions asked for."""
    topics = ctx.broker.topics
    if req.topics is None:
        return [(t, list(range(len(t.partitions)))) for t in topics.all()]
    wanted: dict[str, set[int]] = {}
    for asked in req.topics:
        wanted.setdefault(asked.topic, set()).update(asked.partitions)
    found = []
    for name, indexes in wanted.items():
        topic = topics.get(name)
        if topic is not None:
            found.append((topic, sorted(i for i in indexes if 0 <= i < len(topic.partitions))))
    return found


async def handle(ctx: Context, req: Any) -> Any:
    log_dir = os.path.abspath(ctx.broker.store.data_dir)
    try:
        total, usable = await asyncio.to_thread(_space, log_dir)
    except OSError as exc:
        log.error("cannot describe log dir %s: %s", log_dir, exc)
        result = _Result(error_code=int(ErrorCode.KAFKA_STORAGE_ERROR), log_dir=log_dir,
                         topics=[], total_bytes=-1, usable_bytes=-1, is_cordoned=False)
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result])
    described = []
    for topic, indexes in sorted(_wanted(ctx, req), key=lambda found: found[0].name):
        partitions = [
            _Partition(partition_index=i, partition_size=topic.partitions[i].size_bytes,
                       offset_lag=0, is_future_key=False)
            for i in indexes
        ]
        if partitions:
            described.append(_Topic(name=topic.name, partitions=partitions))
    result = _Result(error_code=0, log_dir=log_dir, topics=described,
                     total_bytes=total, usable_bytes=usable, is_cordoned=False)
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result])
