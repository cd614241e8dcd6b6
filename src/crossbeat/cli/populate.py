"""`crossbeat populate --config FILE`: run the queue populator (wiring only)."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from crossbeat.config import load_toml, section_settings
from crossbeat.errors import CrossbeatError
from crossbeat.populator.auth import SigV4HttpxAuth
from crossbeat.populator.checkpoint import CheckpointFile
from crossbeat.populator.extension import ExtensionContext
from crossbeat.populator.journal import JournalClient
from crossbeat.populator.lease import GroupLease
from crossbeat.populator.publisher import Publisher, ensure_topics
from crossbeat.populator.registry import load_extensions
from crossbeat.populator.service import Populator, wait_for_broker
from crossbeat.populator.settings import PopulatorSettings

# One start-up attempt to reach the broker and create the topics; failed attempts are
# logged and retried with backoff, so this only sets how often a missing broker is reported.
BROKER_ATTEMPT_S = 5.0


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="crossbeat.toml ([populator] and [extensions.<name>] sections)")
@click.option("--gateway", default=None, help="gateway URL (overrides [populator].gateway)")
@click.option("--brokers", default=None, help="Kafka bootstrap servers")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
def populate(config_path: Path | None, gateway: str | None, brokers: str | None,
             data_dir: Path | None) -> None:
    """Tail the gateway journal and publish what the enabled extensions select."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # httpx logs every request at INFO: one line per journal long-poll, every second when idle
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # Installed first: a SIGTERM while we wait for the broker at start must stop us too.
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        doc = load_toml(config_path)
        settings = section_settings(PopulatorSettings, doc, "populator", gateway=gateway,
                                    brokers=brokers, data_dir=data_dir)
        sections: dict[str, Any] = doc.get("extensions", {})
        context = ExtensionContext(topic_prefix=settings.topic_prefix)
        extensions = load_extensions(settings.extensions, sections, context)
        topics = sorted({t for ext in extensions for t in ext.topics()})
        lease_topic = context.topic(settings.lease_topic) if settings.lease else None

        def create_topics() -> None:
            ensure_topics(settings.brokers, topics, settings.topic_partitions,
                          timeout=BROKER_ATTEMPT_S, stop=stop)
            if lease_topic is not None:
                ensure_topics(settings.brokers, [lease_topic], 1, timeout=BROKER_ATTEMPT_S,
                              stop=stop)

        # The broker may start after us: wait for it (a refusal still exits, below).
        if not wait_for_broker(stop, "creating topics", create_topics):
            return
        lease = None
        if lease_topic is not None:
            lease = GroupLease(settings.brokers, settings.lease_group, lease_topic, stop=stop)
        auth = SigV4HttpxAuth(settings.access_key, settings.secret_key.get_secret_value(),
                              settings.region)
        populator = Populator(
            journal=JournalClient(settings.gateway, auth),
            extensions=extensions,
            sink=Publisher(settings.brokers, stop=stop),
            store=CheckpointFile(settings.checkpoint_path),
            consumer_name=settings.consumer_name,
            batch_max=settings.batch_max,
            poll_wait_s=settings.poll_wait_s,
            checkpoint_record_interval_s=settings.checkpoint_record_interval_s,
            lease=lease,
        )
    except CrossbeatError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"crossbeat populate ready: {settings.gateway} -> {settings.brokers} "
               f"({', '.join(e.name for e in extensions)})")
    sys.stdout.flush()
    try:
        populator.run(stop)
    except CrossbeatError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if lease is not None:
            lease.close()
