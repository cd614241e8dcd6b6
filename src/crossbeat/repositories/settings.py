"""`RepositorySettings`: one named data repository in the configuration.

```toml
[gateway.repositories.default]
type = "sfs"
root = "repositories/default"   # relative paths are under the data dir
chunk_size = 4194304

[gateway.repositories.cold]
type = "s3"
endpoint_url = "http://127.0.0.1:9000"
bucket = "crossbeat-data"
access_key = "…"
secret_key = "…"

[gateway.repositories.migrating]
type = "proxy"
backends = ["cold", "default"]
preferred_backend = "default"
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024
DEFAULT_PART_SIZE = 8 * 1024 * 1024


class RepositorySettings(BaseModel):
    """Settings of one repository; which fields apply depends on `type`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["sfs", "s3", "proxy"] = "sfs"

    # sfs
    root: Path | None = Field(
        default=None, description="sfs root; relative to the data dir; default repositories/NAME"
    )
    chunk_size: int = Field(default=DEFAULT_CHUNK_SIZE, ge=1, le=1024 * 1024 * 1024)
    siphash_key: str | None = Field(
        default=None,
        description="16 bytes as 32 hex digits; default: generated and persisted in the root",
    )
    prepared_objects: int = Field(
        default=4096,
        ge=0,
        le=30_000,
        description="small objects' directories made ahead, per gateway process, by a helper "
        "at idle CPU priority: 256 (or this many, if fewer) kept ready at all times, and up to "
        "this many in quiet times, sized to the largest burst of PUTs seen (see sfs_prepared); "
        "0: each PUT makes its own",
    )

    # s3
    endpoint_url: str | None = None
    bucket: str | None = None
    access_key: str | None = None
    secret_key: SecretStr | None = None
    region: str = "us-east-1"
    prefix: str = ""
    part_size: int = Field(default=DEFAULT_PART_SIZE, ge=5 * 1024 * 1024, le=5 * 1024**3)
    # A backend that hangs must cost a request a bounded time: botocore's defaults (60 s
    # per read, and retries) held a request for minutes. A connection is made in
    # milliseconds on a working network, so 5 s only fails a backend that is not there;
    # 30 s between two bytes of an answer is far more than a loaded S3 endpoint takes, and
    # as long as S3 SDKs give a server before they give up. "standard" retries back off
    # with jitter and retry throttling (SlowDown) and 5xx: 3 attempts, as AWS SDKs default
    # to, bound one call at about 3 x 35 s; the client retries a 503 on its own.
    connect_timeout_s: float = Field(default=5.0, gt=0, le=300)
    read_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    max_attempts: int = Field(default=3, ge=1, le=10)
    retry_mode: Literal["standard", "adaptive", "legacy"] = "standard"
    io_threads: int = Field(
        default=8,
        ge=1,
        le=256,
        description="threads per gateway process doing this repository's I/O, apart from "
        "the shared worker threads, so that a hung backend stalls its own buckets only",
    )
    io_queue: int = Field(
        default=64,
        ge=0,
        le=100_000,
        description="calls that may wait for those threads; beyond them requests get 503",
    )

    # proxy
    backends: list[str] = Field(default_factory=list)
    preferred_backend: str | None = None

    @field_validator("siphash_key")
    @classmethod
    def _sixteen_bytes_hex(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            raw = bytes.fromhex(value)
        except ValueError as exc:
            raise ValueError("siphash_key must be hexadecimal") from exc
        if len(raw) != 16:
            raise ValueError("siphash_key must be 16 bytes (32 hex digits)")
        return value.lower()

    @model_validator(mode="after")
    def _fields_for_type(self) -> RepositorySettings:
        if self.type == "s3" and not self.bucket:
            raise ValueError("an s3 repository needs a bucket")
        if self.type == "proxy":
            if not self.backends:
                raise ValueError("a proxy repository needs at least one backend")
            if len(set(self.backends)) != len(self.backends):
                raise ValueError("proxy backends must be distinct")
            if self.preferred_backend is None:
                raise ValueError("a proxy repository needs a preferred_backend")
            if self.preferred_backend not in self.backends:
                raise ValueError("preferred_backend must be one of the backends")
        return self

    @property
    def siphash_key_bytes(self) -> bytes | None:
        return None if self.siphash_key is None else bytes.fromhex(self.siphash_key)
