"""Errors the stream store raises on purpose (all derive from `CrossbeatError`)."""

from __future__ import annotations

from crossbeat.errors import CrossbeatError


class StreamError(CrossbeatError):
    """Base class of the stream store's errors."""


class StreamExists(StreamError):
    """`create_stream` was asked for a name that already exists."""


class StreamNotFound(StreamError):
    """The stream does not exist (or was deleted while the call was in flight)."""


class InvalidStreamName(StreamError):
    """The name is empty, too long, or contains characters a stream name may not hold."""


class OffsetOutOfRange(StreamError):
    """The offset lies outside [start_offset, end_offset] of the stream."""

    def __init__(self, message: str, *, start_offset: int, end_offset: int) -> None:
        super().__init__(message)
        self.start_offset = start_offset
        self.end_offset = end_offset


class CorruptBatch(StreamError):
    """The bytes are not one well-formed Kafka RecordBatch v2 (length, magic, CRC, deltas)."""


class StoreFailed(StreamError):
    """An fsync (or write) failed; the store refuses further appends until it is reopened.

    After a failed fsync the kernel may have dropped dirty pages, so nothing written since the
    last successful fsync can be trusted; reopening runs recovery from what is on disk.
    """


class StoreClosed(StreamError):
    """The store was closed; no further appends are accepted."""
