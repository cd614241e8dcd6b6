"""`BrokerSettings`: the `[broker]` section of crossbeat.toml (env prefix `CROSSBEAT_BROKER_`).

`[broker.stream]` (or `CROSSBEAT_BROKER_STREAM__…`) configures the stream store underneath.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from crossbeat.stream.settings import StreamSettings


def parse_hostport(value: str, default_port: int = 9092) -> tuple[str, int]:
    """Split `HOST:PORT` (IPv6 as `[::1]:9092`); a bare host gets `default_port`."""
    value = value.strip()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.removeprefix(":")
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
    else:
        host, port = value, ""
    if not host:
        raise ValueError(f"no host in {value!r}")
    try:
        port_number = int(port) if port else default_port
    except ValueError:
        raise ValueError(f"port of {value!r} is not a number") from None
    if not 0 <= port_number <= 65535:
        raise ValueError(f"port of {value!r} is out of range")
    return host, port_number


class BrokerSettings(BaseSettings):
    """Everything `crossbeat broker` needs; CLI flags override the file, env overrides both."""

    model_config = SettingsConfigDict(
        env_prefix="CROSSBEAT_BROKER_", env_nested_delimiter="__", extra="forbid"
    )

    data_dir: Path = Field(Path("data/broker"), description="streams, offsets, producer ids")
    listen: str = Field("127.0.0.1:9092", description="HOST:PORT to bind; port 0 = any free port")
    advertise: str | None = Field(
        None, description="HOST:PORT clients reconnect to (Metadata); default: the bound address"
    )
    node_id: int = Field(0, ge=0, description="our broker id in Metadata and FindCoordinator")
    cluster_id: str = "crossbeat"
    auto_create_topics: bool = Field(True, description="create topics a Metadata request names")
    num_partitions: int = Field(1, ge=1, le=10000, description="partitions of auto-created topics")
    max_frame_bytes: int = Field(
        100 * 1024 * 1024, ge=1024, description="largest request frame; bigger ones close the connection"
    )
    max_message_bytes: int = Field(
        1024 * 1024 + 12, ge=1024, description="largest record batch (Kafka's max.message.bytes)"
    )
    max_decompressed_batch_bytes: int = Field(
        32 * 1024 * 1024, ge=1024,
        description="largest a compressed batch may be once decompressed (header + records) "
        "when a topic's compression.type makes the broker rebuild it; larger ones are "
        "MESSAGE_TOO_LARGE. Bounds the memory and event-loop time one batch can cost",
    )
    fetch_max_bytes: int = Field(
        55 * 1024 * 1024, ge=1024,
        description="the most record bytes one Fetch response carries, whatever the request's "
        "max_bytes asks (the smaller of the two applies; the first batch of the first partition "
        "with data is returned whole even if larger, KIP-74); Kafka's fetch.max.bytes",
    )
    connections_max_idle_ms: int = Field(
        600_000, ge=-1,
        description="a connection with no request in flight that has neither received nor sent "
        "anything this long is closed (a frame left half sent too); -1: never. Kafka's "
        "connections.max.idle.ms",
    )
    max_in_flight_per_connection: int = Field(
        64, ge=1, description="requests decoded ahead of their responses on one connection"
    )
    max_in_flight_bytes_per_connection: int = Field(
        100 * 1024 * 1024, ge=1024,
        description="request bytes read ahead of their responses on one connection (one "
        "request is always read, whatever its size)",
    )
    group_min_session_timeout_ms: int = Field(
        1000, ge=1, description="shortest session.timeout.ms a JoinGroup may ask for"
    )
    group_max_session_timeout_ms: int = Field(
        30 * 60 * 1000, ge=1, description="longest session.timeout.ms a JoinGroup may ask for"
    )
    group_initial_rebalance_delay_ms: int = Field(
        0, ge=0, description="wait this long for more members when an empty group gets its first"
    )
    group_consumer_heartbeat_interval_ms: int = Field(
        5000, ge=10, le=3_600_000,
        description="how often members of KIP-848 consumer groups (group.protocol=consumer) "
        "heartbeat; Kafka's group.consumer.heartbeat.interval.ms",
    )
    group_consumer_session_timeout_ms: int = Field(
        45000, ge=20, le=3_600_000,
        description="a KIP-848 consumer group member not heard from this long is removed and "
        "its partitions move; Kafka's group.consumer.session.timeout.ms",
    )
    offsets_compact_after: int = Field(
        10000, ge=10, description="rewrite the committed-offsets log after this many commits"
    )
    offsets_retention_ms: int = Field(
        7 * 24 * 60 * 60 * 1000, ge=100,
        description="committed offsets of an Empty group expire this long after it became Empty "
        "(or after their commit, if later); Kafka's offsets.retention.minutes (7 days)",
    )
    offsets_retention_check_interval_ms: int = Field(
        600_000, ge=100,
        description="how often expired offsets and Dead groups are removed (Kafka's default)",
    )
    producer_id_expiration_ms: int = Field(
        86_400_000, ge=100,
        description="an idempotent producer's state on a partition is dropped once it has "
        "written nothing there this long (unless a transaction of it is open there); "
        "Kafka's producer.id.expiration.ms (1 day)",
    )
    producer_id_expiration_check_interval_ms: int = Field(
        600_000, ge=100,
        description="how often expired producer states are dropped (Kafka's default)",
    )
    transactional_id_expiration_ms: int = Field(
        604_800_000, ge=100,
        description="a transactional id with no transaction under way and no change this "
        "long is removed; Kafka's transactional.id.expiration.ms (7 days)",
    )
    transactional_id_cleanup_interval_ms: int = Field(
        3_600_000, ge=100,
        description="how often expired transactional ids are removed; Kafka's "
        "transaction.remove.expired.transaction.cleanup.interval.ms",
    )
    retention_check_interval_ms: int = Field(
        300_000, ge=100, description="how often expired segments are deleted (Kafka's default)"
    )
    stream: StreamSettings = Field(default_factory=StreamSettings)

    @model_validator(mode="after")
    def _session_bounds_in_order(self) -> BrokerSettings:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                f"group_min_session_timeout_ms ({self.group_min_session_timeout_ms}) is above "
                f"group_max_session_timeout_ms ({self.group_max_session_timeout_ms}): every "
                "JoinGroup would be refused"
            )
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ValueError(
                f"group_consumer_heartbeat_interval_ms ({self.group_consumer_heartbeat_interval_ms})"
                f" must be below group_consumer_session_timeout_ms "
                f"({self.group_consumer_session_timeout_ms}): every member would time out"
            )
        return self

    @field_validator("connections_max_idle_ms")
    @classmethod
    def _check_idle(cls, value: int) -> int:
        if value != -1 and value < 100:
            raise ValueError(f"connections_max_idle_ms must be -1 (never) or at least 100, not {value}")
        return value

    @field_validator("listen", "advertise")
    @classmethod
    def _check_hostport(cls, value: str | None) -> str | None:
        if value is not None:
            parse_hostport(value)
        return value
