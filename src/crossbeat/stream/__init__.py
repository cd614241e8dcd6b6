"""Elastic Stream (seed 004), single node: Kafka RecordBatches in ranges of segment files.

The broker (`crossbeat.broker`) uses this API; `store.py` says exactly what an
acknowledgement means. In short: `append(durable=True)` returns after fdatasync (group
commit across all streams); `end_offset` is the high watermark and only covers fsynced
batches, so reads never return data a crash could take back; `durable=False` batches become
visible after the next group-commit round.

Beyond the contract in the shared API note:
- `Stream.log_end_offset` (next offset to assign, >= end_offset), `Stream.size_bytes`.
- `Stream.limits` / `Stream.update_config(config)`: the Kafka topic configs `segment.bytes`,
  `segment.ms`, `retention.ms`, `retention.bytes` (-1 = unlimited) in a stream's config
  override the store's `StreamSettings` for that stream. `Stream.config` returns a copy.
- The partitionLeaderEpoch the store writes into each batch is the index of the range it
  went to (seal → new range → higher epoch).
- `Stream.seal()` returns the sealed `RangeInfo`; it blocks briefly (fsync + placement write).
- `StreamStore.fsync_count` / `flush_rounds` (benchmarks, tests).
- Errors: `InvalidStreamName` (bad name or config), `StoreFailed` (an fsync failed: every
  later append fails until the store is reopened), `StoreClosed`; `StreamError` is the base.
"""

from crossbeat.stream.batch import BatchHeader, parse_header, validate_batch
from crossbeat.stream.errors import (
    CorruptBatch,
    InvalidStreamName,
    OffsetOutOfRange,
    StoreClosed,
    StoreFailed,
    StreamError,
    StreamExists,
    StreamNotFound,
)
from crossbeat.stream.placement import RangeInfo
from crossbeat.stream.settings import StreamSettings
from crossbeat.stream.store import StreamStore
from crossbeat.stream.stream import Stream

__all__ = [
    "BatchHeader",
    "CorruptBatch",
    "InvalidStreamName",
    "OffsetOutOfRange",
    "RangeInfo",
    "StoreClosed",
    "StoreFailed",
    "Stream",
    "StreamError",
    "StreamExists",
    "StreamNotFound",
    "StreamSettings",
    "StreamStore",
    "parse_header",
    "validate_batch",
]
