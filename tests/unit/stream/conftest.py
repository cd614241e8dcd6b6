"""Fixtures for the stream store tests: real RecordBatches and a store in a temp dir."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from crossbeat.stream import StreamSettings


def make_batch(
    values: list[bytes],
    *,
    timestamp: int = 1_700_000_000_000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamps: list[int] | None = None,
    keys: list[bytes | None] | None = None,
) -> bytearray:
    """A real Kafka RecordBatch v2 (uncompressed) holding `values` (keys None unless given)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for i, value in enumerate(values):
        ts = timestamps[i] if timestamps is not None else timestamp + i
        builder.append(i, timestamp=ts, key=keys[i] if keys is not None else None, value=value,
                       headers=[])
    return builder.build()


def batch_values(data: bytes | memoryview) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in one stored batch."""
    batch = DefaultRecordBatch(bytes(data))
    return [(r.offset, bytes(r.value or b"")) for r in batch]


def all_values(chunks: list[Any]) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    for chunk in chunks:
        out.extend(batch_values(chunk))
    return out


@pytest.fixture
def settings() -> StreamSettings:
    return StreamSettings(flush_max_delay_ms=0.0, index_interval_bytes=256)


def run(coro_fn: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(coro_fn())
