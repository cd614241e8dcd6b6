"""`crossbeat pipeline replication|replication-status …`: run Spark pipelines (wiring only)."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

import click

from crossbeat.config import load_toml, section_settings
from crossbeat.errors import CrossbeatError
from crossbeat.extensions.replication.settings import ReplicationSettings
from crossbeat.spark.pipelines import PIPELINES
from crossbeat.spark.settings import PipelineSettings


@click.command()
@click.argument("names", nargs=-1, required=True, type=click.Choice(PIPELINES))
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="crossbeat.toml ([pipeline] and [extensions.replication] sections)")
@click.option("--master", default=None, help="Spark master (default local[*])")
@click.option("--brokers", default=None, help="Kafka bootstrap servers")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
def pipeline(names: tuple[str, ...], config_path: Path | None, master: str | None,
             brokers: str | None, data_dir: Path | None) -> None:
    """Run the named pipelines as Structured Streaming queries in one Spark session."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        doc = load_toml(config_path)
        ps = section_settings(PipelineSettings, doc, "pipeline", master=master, brokers=brokers,
                              data_dir=data_dir)
        rs = section_settings(ReplicationSettings, doc.get("extensions", {}), "replication")
    except CrossbeatError as exc:
        raise click.ClickException(str(exc)) from exc
    names = tuple(dict.fromkeys(names))  # a name given twice is one pipeline
    if "replication" in names and not rs.sites:
        raise click.ClickException(
            "the replication pipeline has no destination: configure [extensions.replication.sites.NAME]"
        )
    from crossbeat.spark.pipelines import run_pipelines
    from crossbeat.spark.session import build_session

    spark = build_session(ps.master, "crossbeat-" + "+".join(names))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def ready(query_names: list[str]) -> None:
        click.echo(f"crossbeat pipeline ready: {', '.join(query_names)} on {ps.master}")
        sys.stdout.flush()

    try:
        run_pipelines(spark, list(names), ps, rs, stop, on_ready=ready)
    finally:
        spark.stop()
