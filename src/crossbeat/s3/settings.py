"""Gateway settings: the `[gateway]` section of crossbeat.toml, CROSSBEAT_… env overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from crossbeat.s3.numerals import ascii_int


def parse_listen(listen: str) -> tuple[str, int]:
    """Split `HOST:PORT` (IPv6 as `[::1]:PORT`); port 0 picks a free port. ValueError, naming
    the value, for anything else."""
    host, _, port = listen.rpartition(":")
    number = ascii_int(port)
    if not host or number is None or number > 65535:
        raise ValueError(f"--listen must be HOST:PORT with a port from 0 to 65535, got {listen!r}")
    return host.strip("[]"), number


class UserSettings(BaseModel):
    """One S3 user: owns the buckets it creates."""

    access_key: str
    secret_key: SecretStr
    display_name: str = ""


class GatewaySettings(BaseSettings):
    """Everything `crossbeat gateway` needs.

    `access_key`/`secret_key` are the root (admin) credentials, read from
    CROSSBEAT_ACCESS_KEY / CROSSBEAT_SECRET_KEY; when absent the gateway generates a pair once
    and keeps it in the data dir. `repositories` maps location names to repository settings
    (dicts validated by crossbeat.repositories); a bucket's LocationConstraint picks one, and
    `default_location` (an sfs repository in the data dir unless configured) serves the rest.
    """

    model_config = SettingsConfigDict(env_prefix="CROSSBEAT_", extra="ignore")

    data_dir: Path = Path("./data")
    listen: str = "127.0.0.1:8000"
    access_key: str | None = None
    secret_key: SecretStr | None = None
    users: list[UserSettings] = Field(default_factory=list)
    region: str = "us-east-1"
    # Host names under which requests are virtual-hosted: `{bucket}.{domain}` names the
    # bucket (as on AWS). Any other Host is path-style (`/bucket/key`). Without this, a
    # client configured for virtual-hosted style would have `PUT /key` read as CreateBucket.
    virtual_host_domains: list[str] = Field(default_factory=lambda: ["localhost"])
    site: str = "a"
    # The destination sites the replication pipelines reading this gateway are configured
    # with (their [extensions.replication.sites]): the only names a replication rule's
    # StorageClass may use (`replication_config.parse_replication`'s `sites`), so that a
    # typo or an AWS class ("STANDARD") is refused at PutBucketReplication rather than
    # failed by the pipeline for each object. None: not told, any name is taken.
    # `crossbeat up` sets it for site a.
    replication_sites: list[str] | None = None
    repositories: dict[str, dict[str, Any]] = Field(default_factory=dict)
    default_location: str = "default"
    chunk_size: int = 4 * 1024 * 1024
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # a PUT body up to this size is read whole, then written in one worker-thread call
    small_object_bytes: int = Field(default=1024 * 1024, ge=0)
    # a PUT body up to this size is hashed and its files written on the event loop (only
    # the durability wait and the metadata commit go to a worker thread)
    inline_object_bytes: int = Field(default=64 * 1024, ge=0)
    max_object_bytes: int = Field(default=5 * 1024**4, ge=0)
    min_part_bytes: int = Field(default=5 * 1024 * 1024, ge=0)
    worker_threads: int = Field(default=16, ge=1)
    # "lean": s3/http_server.py (less work per request); "uvicorn": the general server
    http_server: Literal["lean", "uvicorn"] = "lean"
    # gateway processes sharing the listening socket; 0 = one per core (at most 4)
    workers: int = Field(default=0, ge=0)
    # Python's GIL switch interval in each gateway process (sys.setswitchinterval); None =
    # 0.5 ms when the gateway is one process, 5 ms (Python's default) with several. A thread
    # that releases the GIL for a syscall (each mkdir/open/write of a staged object) waits
    # up to this long to get it back while another thread computes. One process runs every
    # request's threads beside one event loop: 0.5 ms there halves a 100-replica batch
    # (0.8 -> 0.35 s under the RPO load) and raised 4 KiB PUT/s (796/593 -> 1017/679); with
    # several processes the contention is spread and 5 ms does better (1006/1201 vs 753/662).
    gil_switch_interval_ms: float | None = Field(default=None, gt=0, le=100)
    # Group commit of small PUTs under load: while a gateway process handles at least this
    # many requests, a new sync round waits until the process's previous group is committed,
    # so that everything staged meanwhile shares one round (a syncfs, a metadata transaction
    # and their thread wake-ups) instead of rounds of one or two objects. With fewer, rounds
    # overlap the previous group's commit, which answers each request sooner. 0 = never wait.
    # (s5cmd, 4 KiB PUTs, 2 processes: 64 workers +7-10% PUT/s; 4 and 8 workers unchanged,
    # where waiting always, i.e. 1, costs 4 workers 5%.)
    put_group_busy_requests: int = Field(default=6, ge=0)
    # how often a journal long-poll looks for commits made by another gateway process
    journal_poll_seconds: float = Field(default=0.05, gt=0)
    journal_retention_entries: int = 10_000_000
    journal_retention_seconds: float = 7 * 24 * 3600
    cleanup_on_start: bool = True
    # How often the lifecycle pass (s3/lifecycle.py) applies the buckets' lifecycle rules; one
    # gateway process at a time runs it. 0 disables it (configurations are still stored).
    lifecycle_interval_seconds: float = Field(default=3600, ge=0, le=7 * 24 * 3600)
    # The length of a lifecycle "day" (Expiration Days, NoncurrentDays, DaysAfterInitiation),
    # as Ceph RGW's rgw_lc_debug_interval: shorter only to test rules or watch them act.
    lifecycle_day_seconds: float = Field(default=86400, ge=1, le=86400)

    @field_validator("listen")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("replication_sites")
    @classmethod
    def _site_names(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        sites = [s.strip() for s in value]
        if not all(sites) or any("," in s for s in sites):
            raise ValueError("replication_sites are site names: not empty, without commas")
        return sites

    @field_validator("virtual_host_domains")
    @classmethod
    def _domain_names(cls, value: list[str]) -> list[str]:
        domains = [d.strip().strip(".").lower() for d in value]
        if not all(domains):
            raise ValueError("virtual_host_domains must not contain an empty name")
        return domains
