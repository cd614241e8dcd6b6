"""Elastic Stream (seed 004), single node: Kafka RecordBatches in ranges of segment files.

The broker (`crossbeat.broker`) uses this API; see `store.py` for what an acknowledgement
means. Beyond the contract: `Stream.log_end_offset`, `Stream.size_bytes`,
`StreamStore.fsync_count`, the errors `InvalidStreamName`, `StoreFailed`, `StoreClosed`.
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
