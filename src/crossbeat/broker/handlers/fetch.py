"""Fetch (1): long poll across partitions until `min_bytes` are available or `max_wait_ms`
passes; stored batches are returned verbatim.

Sizes follow KIP-74: each partition gets at most `partition_max_bytes` and the response
at most `max_bytes` (before v3, which has no `max_bytes`: no request limit), capped by the
broker's `fetch_max_bytes` (Kafka's fetch.max.bytes, 55 MiB) whatever the request asks,
except that the first batch of the first partition with data is always returned whole
(else a consumer could never get past a large batch). A partition named more than once
is answered once, as Kafka does (its fetch data is a map keyed by partition): at the
place it was first named, for the fetch offset and limit it was last named with. Without
both, one small request naming a big partition many times could ask for any multiple of
it, past what a response frame (int32 size) can even carry. Only durable
batches are served (the high watermark is the store's `end_offset`). There are no fetch
sessions (session id 0) and no follower reads (preferred replica -1). An unknown partition
or an offset outside [log start, high watermark] answers at once.

Transactions (KIP-98): last_stable_offset is the first offset of the partition's earliest
open transaction, else the high watermark (`crossbeat.broker.partition_txns`). With
isolation_level 1 (read_committed) only batches below it are returned, with the aborted
transactions (producer id, first offset) overlapping the returned range, from which the
client drops aborted records; control batches are returned as stored (clients skip them).
With read_uncommitted everything up to the high watermark is returned and
aborted_transactions is null.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kafka.protocol.consumer import FetchResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.stream import Stream
from crossbeat.stream.errors import OffsetOutOfRange, StreamError

_Topic = FetchResponse.FetchableTopicResponse
_Partition = _Topic.PartitionData
_Aborted = _Partition.AbortedTransaction



def _below(chunks: list[Any], offset: int) -> list[Any]:
    """The leading batches (one per chunk) whose base offset is below `offset`."""
    for i, chunk in enumerate(chunks):
        if int.from_bytes(chunk[:8], "big", signed=True) >= offset:
            return chunks[:i]
    return chunks


def _fetch_data(req: Any) -> list[tuple[str, list[Any]]]:
    """The request's partitions as Kafka reads them: each (topic, partition) once, where it
    was first named, with the fields it was last named with; consecutive partitions of one
    topic grouped under it (so a topic named twice with others between stays twice)."""
    wanted: dict[tuple[str, int], Any] = {}
    for t in req.topics:
        for p in t.partitions:
            wanted[(t.topic, p.partition)] = p  # a repeat keeps the first one's place
    grouped: list[tuple[str, list[Any]]] = []
    for (topic, _partition), p in wanted.items():
        if not grouped or grouped[-1][0] != topic:
            grouped.append((topic, []))
        grouped[-1][1].append(p)
    return grouped


def _collect(ctx: Context, req: Any, fetch_data: list[tuple[str, list[Any]]],
             ) -> tuple[list[Any], int, bool, list[tuple[Stream, int]]]:
    """One pass over `fetch_data` (`_fetch_data` of `req`): (topic responses, bytes, any
    error, waitables). The records returned total at most the smaller of the request's
    `max_bytes` and the broker's `fetch_max_bytes`, except for the first batch of the first
    partition with data (KIP-74)."""
    topics = ctx.broker.topics
    txns = ctx.broker.partition_txns
    committed_only = req.isolation_level == 1
    budget = ctx.broker.settings.fetch_max_bytes
    if ctx.version >= 3:
        budget = min(req.max_bytes, budget)
    used = 0
    errors = False
    waitables: list[tuple[Stream, int]] = []
    out = []
    for topic, partitions in fetch_data:
        parts = []
        for p in partitions:
            stream = topics.partition(topic, p.partition)
            code, hw, start, records = ErrorCode.NONE, -1, -1, b""
            lso, aborted = -1, None
            if stream is None:
                code, errors = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True
            else:
                hw, start = stream.end_offset, stream.start_offset
                limit = min(p.partition_max_bytes, budget - used)
                try:
                    index = txns.get(stream) if committed_only else txns.peek(stream.name)
                    lso = hw if index is None else index.last_stable_offset(hw)
                    if committed_only:
                        aborted = []
                    if limit > 0 or used == 0:
                        chunks = stream.read(p.fetch_offset, max(limit, 1))
                        if committed_only:
                            chunks = _below(chunks, lso)
                            if chunks and index is not None:
                                aborted = [
                                    _Aborted(producer_id=a.producer_id, first_offset=a.first_offset)
                                    for a in index.aborted_overlapping(p.fetch_offset, lso)]
                        size = sum(len(c) for c in chunks)
                        if chunks and (used == 0 or size <= limit):
                            records = b"".join(chunks)
                            used += size
                    waitables.append((stream, hw))
                except OffsetOutOfRange:
                    code, errors = ErrorCode.OFFSET_OUT_OF_RANGE, True
                except StreamError:
                    code, errors = ErrorCode.KAFKA_STORAGE_ERROR, True
            parts.append(_Partition(
                partition_index=p.partition, error_code=int(code), high_watermark=hw,
                last_stable_offset=lso, log_start_offset=start, aborted_transactions=aborted,
                preferred_read_replica=-1, records=records,
            ))
        out.append(_Topic(topic=topic, partitions=parts))
    return out, used, errors, waitables


async def _ensure_indexes(ctx: Context, partitions: list[tuple[str, int]]) -> None:
    """Have the transaction index of each existing partition built."""
    txns, topics = ctx.broker.partition_txns, ctx.broker.topics
    streams = [s for s in (topics.partition(t, p) for t, p in partitions) if s is not None]
    for stream in streams:
        await txns.ensure(stream)


async def handle(ctx: Context, req: Any) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(req.max_wait_ms, 0) / 1000
    fetch_data = _fetch_data(req)
    if req.isolation_level == 1:  # read_committed: the transaction indexes, built off the loop
        await _ensure_indexes(ctx, [(topic, p.partition) for topic, ps in fetch_data for p in ps])
    while True:
        responses, used, errors, waitables = _collect(ctx, req, fetch_data)
        remaining = deadline - loop.time()
        if used >= max(req.min_bytes, 1) or errors or remaining <= 0 or not waitables:
            break
        waiters = [asyncio.ensure_future(s.wait_for(offset, remaining)) for s, offset in waitables]
        try:
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
            for w in waiters:
                with contextlib.suppress(BaseException):
                    await w
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)
