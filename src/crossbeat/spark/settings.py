"""Pipeline settings: the `[pipeline]` section of crossbeat.toml, CROSSBEAT_… overrides."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class PipelineSettings(BaseSettings):
    """Where the pipelines read (`brokers`, topic prefix), where Spark keeps its
    checkpoints (`data_dir`/spark/checkpoints/<query>), and how batches are cut."""

    model_config = SettingsConfigDict(env_prefix="CROSSBEAT_", extra="ignore")

    brokers: str = "127.0.0.1:8002"
    topic_prefix: str = "crossbeat-"
    topic_partitions: int = Field(default=4, ge=1)
    data_dir: Path = Path("./data")
    master: str = "local[*]"
    trigger_ms: int = Field(default=250, ge=0)
    # The status query's trigger; by default `trigger_ms`, or at least 5 s when the
    # replication pipeline sets statuses itself (`apply_status_inline`): the query then
    # only has what the source did not take at once, while each micro-batch has a fixed
    # cost in the Spark driver even when every outcome in it is skipped.
    status_trigger_ms: int | None = Field(default=None, ge=0)
    # The most records one micro-batch takes from a backlog. Large enough that a burst of
    # mixed sizes lands in one batch, where large versions stream beside the batched small
    # ones (replicating 5,000 small + 20 large objects: 25.4 s with 5000, 21.1 s with 10000).
    max_offsets_per_trigger: int = Field(default=10_000, ge=1)
    # Records per Spark task (the source's rowsPerTask): small batches run as one task;
    # lower it on a cluster to spread a large backlog over more executors.
    rows_per_task: int = Field(default=20_000, ge=1)
    starting_offsets: str = "earliest"
    # The source's failOnDataLoss: replication entries removed by retention (or a
    # recreated topic) before the pipeline read them stop its query with an error naming
    # them (restarted, it stops again until this is set false, which skips them with a
    # warning): an unreplicated object must not go unnoticed.
    fail_on_data_loss: bool = True

    def checkpoint_dir(self, query: str) -> Path:
        return self.data_dir / "spark" / "checkpoints" / query

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"
