"""Settings of the stream store: the `[stream]` section of the broker's config file."""

from __future__ import annotations

from pydantic import BaseModel, Field

MiB = 1024 * 1024
DAY_MS = 24 * 3600 * 1000


class StreamSettings(BaseModel):
    """Segment, retention and group-commit knobs shared by every stream of one store."""

    # Positions inside a segment are stored as unsigned 32-bit numbers in the index files.
    segment_bytes: int = Field(default=64 * MiB, ge=1024, le=2**31 - 1)
    """Roll the active segment before an append would take it past this size."""
    segment_ms: int = Field(default=7 * DAY_MS, ge=1)
    """Roll the active segment once it is this old (Kafka's segment.ms): counted from its
    creation, or for a segment reopened after a restart from its first batch's timestamp,
    so that restarts do not reset the clock."""
    retention_ms: int | None = Field(default=7 * DAY_MS, ge=0)
    """Delete whole segments whose newest batch timestamp is older than this; None = forever."""
    retention_bytes: int | None = Field(default=None, ge=0)
    """Delete the oldest whole segments while a stream stays at or above this size."""
    index_interval_bytes: int = Field(default=4096, ge=1)
    """Sparse offset/time index: one entry per this many bytes of batches."""
    flush_max_delay_ms: float = Field(default=2.0, ge=0.0, le=1000.0)
    """Group commit: the longest the first durable append of a round waits for company."""
