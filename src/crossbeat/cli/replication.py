"""`crossbeat replication failed | retry | pause | resume` (wiring only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import orjson

from crossbeat.config import load_toml, section_settings
from crossbeat.errors import CrossbeatError
from crossbeat.extensions.replication.control import set_paused
from crossbeat.extensions.replication.gateway import GatewayClient
from crossbeat.extensions.replication.settings import ReplicationSettings
from crossbeat.spark.settings import PipelineSettings


def _settings(ctx: click.Context) -> tuple[ReplicationSettings, PipelineSettings]:
    doc = load_toml(ctx.obj["config"])
    rs = section_settings(ReplicationSettings, doc.get("extensions", {}), "replication")
    if ctx.obj["gateway"]:
        rs.source.endpoint = ctx.obj["gateway"]
    ps = section_settings(PipelineSettings, doc, "pipeline", brokers=ctx.obj["brokers"])
    return rs, ps


@click.group()
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--gateway", default=None, help="source gateway URL (overrides the config)")
@click.option("--brokers", default=None, help="Kafka bootstrap servers (pause/resume)")
@click.pass_context
def replication(ctx: click.Context, config_path: Path | None, gateway: str | None,
                brokers: str | None) -> None:
    """Inspect and steer cross-site replication."""
    ctx.obj = {"config": config_path, "gateway": gateway, "brokers": brokers}


@replication.command()
@click.option("--limit", default=1000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="one JSON document per line")
@click.pass_context
def failed(ctx: click.Context, limit: int, as_json: bool) -> None:
    """List versions whose replication FAILED."""
    try:
        rs, _ = _settings(ctx)
        items: list[dict[str, Any]] = GatewayClient(rs.source).failed(limit=limit)
    except CrossbeatError as exc:
        raise click.ClickException(str(exc)) from exc
    for item in items:
        if as_json:
            click.echo(orjson.dumps(item).decode())
        else:
            sites = ",".join(b["site"] for b in item.get("backends", []) if b.get("status") == "FAILED")
            click.echo(f"{item['bucket']}\t{item['key']}\t{item['versionId']}\t{sites}")
    if not as_json:
        click.echo(f"{len(items)} failed version(s)", err=True)


@replication.command()
@click.option("--all", "all_", is_flag=True, help="requeue every failed version")
@click.argument("target", nargs=-1)
@click.pass_context
def retry(ctx: click.Context, all_: bool, target: tuple[str, ...]) -> None:
    """Requeue failed versions: --all, or BUCKET KEY VERSION."""
    if all_ == bool(target) or (target and len(target) != 3):
        raise click.UsageError("give either --all or BUCKET KEY VERSION")
    body: dict[str, Any] = (
        {"all": True} if all_ else dict(zip(("bucket", "key", "versionId"), target, strict=True))
    )
    try:
        rs, _ = _settings(ctx)
        n = GatewayClient(rs.source).retry(body)
    except CrossbeatError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"requeued {n} version(s)")


def _set(ctx: click.Context, site: str, paused: bool) -> None:
    try:
        rs, ps = _settings(ctx)
        rs.site(site)
        set_paused(ps.brokers, ps.topic(rs.control_topic), site, paused)
    except CrossbeatError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"site {site} {'paused' if paused else 'resumed'}")


@replication.command()
@click.argument("site")
@click.pass_context
def pause(ctx: click.Context, site: str) -> None:
    """Stop replicating to SITE; entries wait in the queue."""
    _set(ctx, site, True)


@replication.command()
@click.argument("site")
@click.pass_context
def resume(ctx: click.Context, site: str) -> None:
    """Resume replicating to SITE from where it paused."""
    _set(ctx, site, False)
