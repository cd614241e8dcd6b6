"""`crossbeat topology`: stretched multi-site planning (wiring only; see crossbeat.topology)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from crossbeat.topology.analysis import Scenario, analyse_all, to_json
from crossbeat.topology.bundle import render_plan, write_plan
from crossbeat.topology.errors import TopologyError
from crossbeat.topology.failback import failback as failback_runbook
from crossbeat.topology.failover import failover as failover_runbook
from crossbeat.topology.mirrormaker import mirror_maker_failback, mirror_maker_failover
from crossbeat.topology.plan import TopicPlan, plan_topics
from crossbeat.topology.sitemap import SiteMap, load_sitemap

F = TypeVar("F", bound=Callable[..., Any])
MAP = click.argument("site_map", metavar="MAP", type=click.Path(dir_okay=False, path_type=Path))


def placement_options(fn: F) -> F:
    fn = click.option(
        "--rack-unaware",
        is_flag=True,
        help="Assign as Kafka does without broker.rack (no per-site copies arranged).",
    )(fn)
    fn = click.option(
        "--start-index",
        type=click.IntRange(min=0),
        help="Fixed start index for every topic (default: the map's, else from the topic name).",
    )(fn)
    fn = click.option(
        "--shift",
        type=click.IntRange(min=0),
        help="Fixed follower shift for every topic (default: as the start index).",
    )(fn)
    return fn


PLACEMENT_HELP = """
Placement is deterministic: a topic's start index and shift come from --start-index/--shift,
else from the topic's own settings, else from the map's [placement], else from a hash of the
topic name (a fixed stand-in for Kafka's random draw). plan, check, failover and failback
therefore agree on the assignment, provided they get the same placement options: pass the
options the plan was made with to its runbooks too.
"""


def _load(site_map: Path, **placement: Any) -> tuple[SiteMap, list[TopicPlan]]:
    try:
        sitemap = load_sitemap(site_map)
        plans = plan_topics(
            sitemap,
            rack_aware=False if placement.get("rack_unaware") else None,
            start_index=placement.get("start_index"),
            shift=placement.get("shift"),
        )
    except TopologyError as exc:
        raise click.ClickException(str(exc)) from exc
    return sitemap, plans


@click.group(
    help="Plan a stretched multi-site deployment and its failover (seed 001).\n" + PLACEMENT_HELP
)
def topology() -> None:
    """Plan a stretched multi-site deployment and its failover (seed 001)."""


@topology.command()
@MAP
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@placement_options
def plan(site_map: Path, out_dir: Path, **placement: Any) -> None:
    """Write assignments, broker/quorum/client configs and topic commands to --out.

    The bundle is built next to --out and swapped in once complete: a failure leaves the
    previous bundle as it was, and files of servers no longer in the map disappear. An
    existing --out that is neither empty nor a previous bundle (no plan.json) is refused.
    """
    sitemap, plans = _load(site_map, **placement)
    try:
        written = write_plan(render_plan(sitemap, plans), out_dir)
    except TopologyError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        where = exc.filename or out_dir
        raise click.ClickException(
            f"cannot write the plan to {out_dir} ({exc.strerror or exc}: {where}); "
            "the previous bundle, if any, is unchanged"
        ) from exc
    for p in plans:
        layout = "internal, created by Kafka" if p.internal else p.replica_assignment_arg()
        click.echo(
            f"{p.name}: RF {p.durability.replication_factor}, acks={p.durability.acks}, "
            f"min.insync.replicas={p.durability.min_insync_replicas}, "
            f"{'rack-aware' if p.rack_aware else 'rack-unaware'}, "
            f"start index {p.start_index}, shift {p.shift}, {layout}"
        )
    click.echo(f"wrote {len(written)} files under {out_dir}")


@topology.command()
@MAP
@click.option("--json", "as_json", is_flag=True, help="Print the scenarios as JSON.")
@placement_options
def check(site_map: Path, as_json: bool, **placement: Any) -> None:
    """Failure analysis: every server, every pair of servers, each site."""
    sitemap, plans = _load(site_map, **placement)
    scenarios = analyse_all(sitemap, plans)
    if as_json:
        click.echo(json.dumps(to_json(scenarios), indent=2))
        return
    table = _table(scenarios, plans)
    console = Console()
    if not console.is_terminal:
        # Piped or redirected: rich would assume 80 columns and cut topic names; use the
        # table's natural width instead (measured unbounded: measure caps at the width).
        natural = Console(width=1_000_000).measure(table).maximum
        console = Console(width=max(console.width, natural))
    console.print(table)


def _table(scenarios: list[Scenario], plans: list[TopicPlan]) -> Table:
    table = Table(title="Per topic: writable/partitions, acked data at risk, offline")
    table.add_column("lost")
    table.add_column("kind")
    table.add_column("quorum")
    for p in plans:
        d = p.durability
        # fold, not ellipsis: a narrow terminal wraps a topic name instead of cutting it
        table.add_column(f"{p.name}\nacks={d.acks} RF {d.replication_factor}", overflow="fold")
    for s in scenarios:
        cells = []
        for t in s.topics:
            n = len(t.partitions)
            if t.writable < n:
                style = "red"
            elif t.may_lose_acked:
                style = "yellow"
            else:
                style = "green"
            cells.append(f"[{style}]{t.writable}/{n}  risk {t.may_lose_acked}  off {t.offline}[/]")
        quorum = "[green]ok[/]" if s.quorum_ok else "[red]lost[/]"
        table.add_row(s.label, s.kind, quorum, *cells)
    return table


@topology.command()
@MAP
@click.option("--lost", "site", required=True, help="The site that is lost.")
@click.option("--mirror-maker", is_flag=True, help="The MirrorMaker 2 alternative instead.")
@placement_options
def failover(site_map: Path, site: str, mirror_maker: bool, **placement: Any) -> None:
    """The ordered failover runbook for the temporary loss of a site.

    The procedure depends on whether the voters off the site keep a majority of the
    metadata quorum. Pass the placement options the plan was made with.
    """
    sitemap, plans = _load(site_map, **placement)
    build = mirror_maker_failover if mirror_maker else failover_runbook
    try:
        click.echo(build(sitemap, plans, site).to_text())
    except TopologyError as exc:
        raise click.ClickException(str(exc)) from exc


@topology.command()
@MAP
@click.option("--restored", "site", required=True, help="The site that is back.")
@click.option("--mirror-maker", is_flag=True, help="The MirrorMaker 2 alternative instead.")
@placement_options
def failback(site_map: Path, site: str, mirror_maker: bool, **placement: Any) -> None:
    """The ordered failback runbook once a lost site is back.

    Ends in the planned assignment: pass the placement options the plan was made with.
    """
    sitemap, plans = _load(site_map, **placement)
    build = mirror_maker_failback if mirror_maker else failback_runbook
    try:
        click.echo(build(sitemap, plans, site).to_text())
    except TopologyError as exc:
        raise click.ClickException(str(exc)) from exc
