"""Replication settings: the `[extensions.replication]` section of crossbeat.toml.

```toml
[extensions.replication]
source = { endpoint = "http://127.0.0.1:8000" }          # credentials default to the root pair

[extensions.replication.sites.b]
endpoint = "http://127.0.0.1:8001"
type = "crossbeat"                                         # or "s3" for any S3 endpoint
access_key = "…"                                           # defaults to CROSSBEAT_ACCESS_KEY
secret_key = "…"
```
A bucket's replication rule names destination sites in its StorageClass ("b" or "b,c").
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Endpoint(BaseModel):
    """An S3 endpoint and the credentials used there (admin for a crossbeat gateway)."""

    endpoint: str
    access_key: str = ""
    secret_key: SecretStr = SecretStr("")
    region: str = "us-east-1"


class SiteSettings(Endpoint):
    """A destination site. `type = "crossbeat"` writes through the gateway's internal routes
    (same versionId, status REPLICA); `type = "s3"` uses standard S3 calls (see
    `destinations.S3Destination` for what differs)."""

    type: Literal["crossbeat", "s3"] = "crossbeat"


class RetrySettings(BaseModel):
    """Exponential backoff for retryable errors, bounded by attempts and by elapsed time."""

    max_attempts: int = Field(default=8, ge=1)
    max_seconds: float = Field(default=60.0, gt=0)
    backoff_min_s: float = Field(default=0.2, gt=0)
    backoff_max_s: float = Field(default=10.0, gt=0)
    factor: float = Field(default=2.0, ge=1)
    jitter: float = Field(default=0.2, ge=0, le=1)


class ReplicationSettings(BaseSettings):
    """Everything the replication filter, processor and status updater need."""

    model_config = SettingsConfigDict(env_prefix="CROSSBEAT_", extra="ignore")

    access_key: str = ""  # CROSSBEAT_ACCESS_KEY: the default for every endpoint
    secret_key: SecretStr = SecretStr("")
    source: Endpoint = Endpoint(endpoint="http://127.0.0.1:8000")
    sites: dict[str, SiteSettings] = Field(default_factory=dict)
    topic: str = "replication"
    status_topic: str = "replication-status"
    control_topic: str = "replication-control"
    delete_markers: bool = True
    multipart_threshold_bytes: int = Field(default=32 * 1024 * 1024, ge=5 * 1024 * 1024)
    part_size_bytes: int = Field(default=16 * 1024 * 1024, ge=5 * 1024 * 1024)
    concurrency: int = Field(default=16, ge=1, le=256)
    # The replication pipeline sets each outcome at the source itself (one compare-and-set
    # batch request) and publishes it marked `applied`; the status pipeline then only
    # applies what that could not settle. This saves a second micro-batch between a PUT
    # and its COMPLETED status. False: the status pipeline applies every outcome.
    apply_status_inline: bool = True
    retry: RetrySettings = RetrySettings()
    # An endpoint (the site or the source) that does not answer, or answers 502, 503, 504
    # or 507, says nothing about the versions being replicated. Once their retries are
    # spent, the batch holds them (PENDING; the query's offsets do not move) and probes both
    # endpoints, backing off up to `unavailable_probe_max_s`, until they answer; then it
    # replicates them. After `unavailable_hold_s` of holding they go FAILED as any other
    # failure (`crossbeat replication retry`), so that a site gone for good does not keep
    # its entries waiting for ever. 0 = no holding: FAILED once the retries are spent.
    unavailable_hold_s: float = Field(default=24 * 3600.0, ge=0)
    unavailable_probe_max_s: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _default_credentials(self) -> ReplicationSettings:
        for ep in [self.source, *self.sites.values()]:
            if not ep.access_key:
                ep.access_key = self.access_key
            if not ep.secret_key.get_secret_value():
                ep.secret_key = self.secret_key
        return self

    def site(self, name: str) -> SiteSettings:
        from crossbeat.errors import ConfigError

        try:
            return self.sites[name]
        except KeyError:
            known = ", ".join(sorted(self.sites)) or "none"
            raise ConfigError(f"unknown replication site {name!r} (configured: {known})") from None
