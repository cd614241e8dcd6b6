"""Settings of the metadata store (section `[metadata]` of crossbeat.toml).

Environment variables `CROSSBEAT_METADATA_<FIELD>` override the file (pydantic-settings).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class MetadataSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CROSSBEAT_METADATA_", extra="forbid")

    url: str = Field(
        default="",
        description="store location: `sqlite:///path`, a plain path, or empty for "
        "`<data dir>/metadata.sqlite3` (decided by the caller)",
    )
    journal_retention_entries: int | None = Field(
        default=1_000_000,
        ge=1,
        description="trim_journal keeps at most this many newest entries, even if a consumer "
        "has not read them (None: no bound)",
    )
    journal_retention_seconds: float | None = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="trim_journal drops entries older than this, consumed or not (None: no bound)",
    )
    busy_timeout_ms: int = Field(
        default=10_000, ge=0, description="how long a connection waits for a lock held elsewhere"
    )
    max_batch: int = Field(
        default=512, ge=1, description="most queued write operations one group commit carries"
    )
    journal_poll_seconds: float = Field(
        default=0.5,
        gt=0,
        description="wait_journal re-reads the database this often, to notice commits made "
        "by another process (commits of this process wake it at once)",
    )
    journal_trim_interval_seconds: float | None = Field(
        default=60.0,
        gt=0,
        description="the store applies retention (trim_journal) this often in the background "
        "(None: only when trim_journal is called)",
    )
