"""Populator settings: the `[populator]` section of crossbeat.toml, CROSSBEAT_… overrides."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class PopulatorSettings(BaseSettings):
    """Everything `crossbeat populate` needs.

    `gateway` is the site's gateway (its journal routes are signed with the admin
    credentials `access_key`/`secret_key`, env CROSSBEAT_ACCESS_KEY / CROSSBEAT_SECRET_KEY).
    `extensions` names the enabled extensions; each reads `[extensions.<name>]`.
    With `lease = true` several populators may run: one holds the lease and publishes.
    """

    model_config = SettingsConfigDict(env_prefix="CROSSBEAT_", extra="ignore")

    gateway: str = "http://127.0.0.1:8000"
    access_key: str = ""
    secret_key: SecretStr = SecretStr("")
    region: str = "us-east-1"
    brokers: str = "127.0.0.1:8002"
    topic_prefix: str = "crossbeat-"
    topic_partitions: int = Field(default=4, ge=1)
    extensions: list[str] = Field(default_factory=lambda: ["replication"])
    data_dir: Path = Path("./data")
    consumer_name: str = "populator"
    batch_max: int = Field(default=2000, ge=1, le=100_000)
    poll_wait_s: float = Field(default=1.0, ge=0, le=60)
    checkpoint_record_interval_s: float = Field(default=180.0, gt=0)
    lease: bool = False
    lease_group: str = "crossbeat-populator"
    lease_topic: str = "populator-lease"

    @field_validator("gateway")
    @classmethod
    def _gateway_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"gateway must be an http(s)://HOST[:PORT] URL, got {value!r}")
        return value

    @property
    def checkpoint_path(self) -> Path:
        return self.data_dir / "populator" / f"{self.consumer_name}.checkpoint.json"
