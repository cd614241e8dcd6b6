"""`crossbeat broker`: run the Kafka-protocol broker (wiring only; see crossbeat.broker)."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import click

from crossbeat.broker.server import run_broker
from crossbeat.broker.settings import BrokerSettings
from crossbeat.cli.datadir_lock import hold_data_dir
from crossbeat.config import load_toml, section_settings
from crossbeat.errors import ConfigError


@click.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for streams, committed offsets and producer ids.")
@click.option("--listen", default=None, help="HOST:PORT to bind (default 127.0.0.1:9092; port 0 = any).")
@click.option("--advertise", default=None, help="HOST:PORT clients are told to connect to.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="crossbeat.toml; its [broker] section configures the broker.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def broker(data_dir: Path | None, listen: str | None, advertise: str | None,
           config_file: Path | None, log_level: str) -> None:
    """Serve the Kafka protocol on top of crossbeat's stream store."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = section_settings(BrokerSettings, load_toml(config_file), "broker",
                                    data_dir=data_dir, listen=listen, advertise=advertise)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    _lock = hold_data_dir(settings.data_dir, "broker")  # held while we serve
    asyncio.run(_serve(settings))


async def _serve(settings: BrokerSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def ready(host: str, port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        click.echo(f"crossbeat broker listening on kafka://{shown}:{port}")

    await run_broker(settings, ready, stop)
