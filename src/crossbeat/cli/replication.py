"""`crossbeat replication failed | retry | pause | resume` (wiring only)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import orjson

from crossbeat.config import load_toml, section_settings
from crossbeat.errors import CrossbeatError
from crossbeat.extensions.replication.control import ControlClient, ControlError, set_paused
from crossbeat.extensions.replication.settings import ReplicationSettings
from crossbeat.spark.settings import PipelineSettings

# Answers that mean the credentials, not the request, are wrong.
CREDENTIAL_CODES = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
                              "AuthorizationHeaderMalformed"})
MAX_LIMIT = 10_000  # the most the gateway lists in one answer


def _url_error(value: str) -> str | None:
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return f"must be an http(s)://HOST[:PORT] URL, got {value!r} (bad port)"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an http(s)://HOST[:PORT] URL, got {value!r}"
    return None


def _gateway_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and (error := _url_error(value)):
        raise click.BadParameter(error)
    return value


def _settings(ctx: click.Context) -> tuple[ReplicationSettings, PipelineSettings]:
    doc = load_toml(ctx.obj["config"])
    rs = section_settings(ReplicationSettings, doc.get("extensions", {}), "replication")
    if ctx.obj["gateway"]:
        rs.source.endpoint = ctx.obj["gateway"]
    ps = section_settings(PipelineSettings, doc, "pipeline", brokers=ctx.obj["brokers"])
    return rs, ps


def _client(ctx: click.Context) -> ControlClient:
    """The source gateway's client, once its URL and the credentials are known to be usable
    (a URL without a scheme failed deep in request signing; empty credentials came back as
    the gateway's raw XML)."""
    try:
        rs, _ = _settings(ctx)
    except CrossbeatError as exc:
        raise click.ClickException(str(exc)) from exc
    source = rs.source
    if error := _url_error(source.endpoint):
        raise click.ClickException(f"[extensions.replication] source.endpoint {error}")
    missing = [name for name, value in (("CROSSBEAT_ACCESS_KEY", source.access_key),
                                        ("CROSSBEAT_SECRET_KEY", source.secret_key.get_secret_value()))
               if not value]
    if missing:
        hint = ""
        if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
            hint = ("; AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not read, but with `crossbeat up`"
                    " they are the same pair: export CROSSBEAT_ACCESS_KEY=$AWS_ACCESS_KEY_ID"
                    " CROSSBEAT_SECRET_KEY=$AWS_SECRET_ACCESS_KEY")
        raise click.ClickException(
            f"no credentials for {source.endpoint}: set {' and '.join(missing)} to the gateway's"
            f" root pair (`crossbeat up` prints them){hint}"
        )
    return ControlClient(source, pool=1)


def _fail(exc: ControlError) -> click.ClickException:
    message = str(exc)
    if exc.code in CREDENTIAL_CODES:
        message += ": check CROSSBEAT_ACCESS_KEY and CROSSBEAT_SECRET_KEY (the gateway's root pair)"
    return click.ClickException(message)


@click.group(epilog="""\b
failed and retry call the source gateway with its root credentials, from
CROSSBEAT_ACCESS_KEY and CROSSBEAT_SECRET_KEY (or access_key / secret_key in the
config's [extensions.replication]); AWS_* variables are not read. pause and resume
only need the brokers.""")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="crossbeat.toml ([extensions.replication] and [pipeline] sections)")
@click.option("--gateway", default=None, callback=_gateway_option, metavar="URL",
              help="source gateway, http(s)://HOST[:PORT] (overrides the config)")
@click.option("--brokers", default=None, help="Kafka bootstrap servers (pause/resume)")
@click.pass_context
def replication(ctx: click.Context, config_path: Path | None, gateway: str | None,
                brokers: str | None) -> None:
    """Inspect and steer cross-site replication."""
    ctx.obj = {"config": config_path, "gateway": gateway, "brokers": brokers}


@replication.command()
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=1000, show_default=True,
              help=f"list at most N versions (1 to {MAX_LIMIT})")
@click.option("--json", "as_json", is_flag=True, help="one JSON document per line")
@click.pass_context
def failed(ctx: click.Context, limit: int, as_json: bool) -> None:
    """List versions whose replication FAILED, with the sites that failed.

    The reason is not kept with the version: the replication pipeline logs it
    ("replication of BUCKET/KEY VERSION to SITE failed …"; with `crossbeat up`, in
    logs/pipelines.log of its data dir)."""
    client = _client(ctx)
    try:
        items = client.list_failed(limit)
    except ControlError as exc:
        raise _fail(exc) from exc
    for item in items:
        if as_json:
            click.echo(orjson.dumps(item).decode())
        else:
            sites = ",".join(b["site"] for b in item.get("backends", []) if b.get("status") == "FAILED")
            click.echo(f"{item['bucket']}\t{item['key']}\t{item['versionId']}\t{sites}")
    if not as_json:
        more = f" (the first {limit}: there may be more, see --limit)" if len(items) >= limit else ""
        click.echo(f"{len(items)} failed version(s){more}", err=True)


@replication.command()
@click.option("--all", "all_", is_flag=True, help="requeue every failed version")
@click.argument("target", nargs=-1)
@click.pass_context
def retry(ctx: click.Context, all_: bool, target: tuple[str, ...]) -> None:
    """Requeue failed versions: --all, or BUCKET KEY VERSION.

    Only FAILED sites are requeued. For BUCKET KEY VERSION, nothing requeued is said
    with the reason; a version that does not exist is an error (exit status 1)."""
    if all_ == bool(target) or (target and len(target) != 3):
        raise click.UsageError("give either --all or BUCKET KEY VERSION")
    body: dict[str, Any] = (
        {"all": True} if all_ else dict(zip(("bucket", "key", "versionId"), target, strict=True))
    )
    client = _client(ctx)
    try:
        n = client.requeue(body)
        if n or all_:
            click.echo(f"requeued {n} version(s)")
            return
        bucket, key, version_id = target
        md = client.version(bucket, key, version_id)
    except ControlError as exc:
        raise _fail(exc) from exc
    if md is None:
        raise click.ClickException(
            f"nothing requeued: no version {version_id} of {bucket}/{key} at {client.endpoint}")
    info = md.get("replicationInfo") or {}
    sites = ", ".join(f"{b.get('site')} {b.get('status')}" for b in info.get("backends") or [])
    if not info:
        why = "it has no replication status (no replication rule applied when it was written)"
    else:
        why = f"its replication status is {info.get('status')}" + (f" ({sites})" if sites else "")
    click.echo(f"requeued 0 version(s): {why}; only FAILED sites are requeued")


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
