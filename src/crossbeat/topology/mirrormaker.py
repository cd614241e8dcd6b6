"""The MirrorMaker 2 alternative for high-latency sites (seed 001, rejected for stretched).

One Kafka cluster per site (every server of a non-witness site runs a broker; RF 3,
min.insync.replicas 2, acks=all for notification, no rack awareness), and one active
direction: the majority site is active and MirrorMaker 2 copies its topics to the other
site asynchronously, keeping topic names (identity policy) and translating consumer group
offsets. What MirrorMaker has not copied yet is lost with the active site, so the restart
point is the populator's periodic checkpoint record (its journal seq, written into every
topic): the surviving site re-publishes from there. Records between that checkpoint and the
loss are delivered twice (processors are idempotent; a notification may repeat), never lost.

The layout needs a second non-witness site with servers (the copy site): a map without one
gets a TopologyError, not a runbook. Kafka's internal topics are never mirrored, searched
or deleted here (each cluster keeps its own; MirrorMaker translates consumer offsets).
"""

from __future__ import annotations

from collections.abc import Sequence

from crossbeat.topology import render
from crossbeat.topology.errors import TopologyError
from crossbeat.topology.plan import TopicPlan
from crossbeat.topology.runbook import FileChange, Runbook, Step, q, split_site
from crossbeat.topology.sitemap import Server, SiteMap


def site_bootstrap(sitemap: SiteMap, site: str) -> str:
    """bootstrap.servers of `site`'s own cluster in the MirrorMaker layout."""
    servers = sitemap.servers_on(site)
    if not servers:
        raise TopologyError(f"site {site!r} has no server to run a Kafka cluster on")
    return render.broker_endpoints(servers, sitemap.cluster.broker_port)


def copy_site(sitemap: SiteMap) -> str:
    """The site MirrorMaker copies the majority site's topics to."""
    active = sitemap.majority_site().name
    for site in sitemap.sites:
        if site.name != active and site.role != "witness" and sitemap.servers_on(site.name):
            return site.name
    raise TopologyError(
        "the MirrorMaker layout needs a second site with servers besides the majority site "
        f"{active!r} (witness sites hold no cluster)"
    )


def _mirrored(plans: Sequence[TopicPlan]) -> list[TopicPlan]:
    return [p for p in plans if not p.internal]


def _client_change(
    sitemap: SiteMap, server: Server, before: str | None, after: str | None
) -> FileChange:
    """client.properties with bootstrap.servers `before` -> `after` (None: as planned)."""
    text = render.client_properties(sitemap, server)
    line = next(x for x in text.splitlines() if x.startswith("bootstrap.servers="))

    def with_bootstrap(value: str | None) -> str:
        return text if value is None else text.replace(line, f"bootstrap.servers={value}")

    return FileChange(
        server.name,
        "/etc/crossbeat/client.properties",
        with_bootstrap(before),
        with_bootstrap(after),
    )


def _checkpoint_step(sitemap: SiteMap, plans: Sequence[TopicPlan], site: str) -> Step:
    bootstrap = site_bootstrap(sitemap, site)
    commands = tuple(
        f"kcat -b {q(bootstrap)} -C -t {q(p.name)} -o beginning -e -q "
        '| grep \'"kind": *"checkpoint"\' | tail -n 1'
        for p in _mirrored(plans)
    )
    return Step(
        f"Find the restart point in site {site}'s copies",
        sitemap.servers_on(site)[0].name,
        commands,
        note="Each line is the populator's latest checkpoint record that reached this site; "
        "the restart point is the smallest journal seq among them.",
    )


def _crossbeat_servers(sitemap: SiteMap, site: str) -> list[Server]:
    return [s for s in sitemap.servers_on(site) if s.runs("populator") or s.runs("pipelines")]


def _mm2_change(
    sitemap: SiteMap,
    plans: Sequence[TopicPlan],
    server: Server,
    before: tuple[str, str],
    after: tuple[str, str],
) -> FileChange:
    return FileChange(
        server.name,
        "/etc/kafka/mm2.properties",
        render.mirror_maker_properties(sitemap, plans, *before),
        render.mirror_maker_properties(sitemap, plans, *after),
    )


def _deletes(sitemap: SiteMap, plans: Sequence[TopicPlan], site: str) -> tuple[str, ...]:
    bootstrap = q(site_bootstrap(sitemap, site))
    return tuple(
        f"kafka-topics.sh --bootstrap-server {bootstrap} --delete --topic {q(p.name)}"
        for p in _mirrored(plans)
    )


def mirror_maker_failover(sitemap: SiteMap, plans: Sequence[TopicPlan], lost_site: str) -> Runbook:
    """Failover of the MirrorMaker layout when `lost_site` is lost."""
    lost, _ = split_site(sitemap, lost_site)
    active = sitemap.majority_site().name
    title = f"MirrorMaker failover: site {lost_site} lost"
    if lost_site != active:
        return Runbook(
            title,
            f"Site {lost_site} only received copies: production continues on {active}.",
            [
                Step(
                    "Stop MirrorMaker 2 (its target is gone)",
                    note="Leave its config as is: on restart it resumes from the source "
                    f"offsets it stored in site {lost_site}'s mm2-offsets topic.",
                )
            ],
        )
    survivor = copy_site(sitemap)
    servers = _crossbeat_servers(sitemap, survivor)
    steps = [
        Step(
            "Stop MirrorMaker 2 and the crossbeat services still pointing at the lost site",
            ", ".join(s.name for s in sitemap.servers_on(survivor)),
            note="MirrorMaker's source is gone; stopping it keeps it from re-copying on recovery.",
        ),
        _checkpoint_step(sitemap, plans, survivor),
        Step(
            f"Point crossbeat's clients on site {survivor} at its own cluster",
            ", ".join(s.name for s in servers),
            files=tuple(
                _client_change(sitemap, s, None, site_bootstrap(sitemap, survivor)) for s in servers
            ),
        ),
        Step(
            "Check the pipelines' consumer groups: MirrorMaker translated their offsets",
            servers[0].name if servers else "",
            (
                f"kafka-consumer-groups.sh --bootstrap-server {q(site_bootstrap(sitemap, survivor))} --describe --all-groups",
            ),
        ),
        Step(
            "Restart the populator from the restart point",
            ", ".join(s.name for s in servers if s.runs("populator")),
            note="Set the populator's checkpoint to the restart seq found above, then start it "
            "and the pipelines. Entries after that seq are published again: redelivery, "
            "never a gap.",
        ),
    ]
    summary = (
        f"Lost: {', '.join(s.name for s in lost)} (the active site). Site {survivor} becomes "
        "active from the last checkpoint MirrorMaker copied."
    )
    return Runbook(title, summary, steps)


def mirror_maker_failback(
    sitemap: SiteMap, plans: Sequence[TopicPlan], restored_site: str
) -> Runbook:
    """Failback of the MirrorMaker layout once `restored_site` is back."""
    split_site(sitemap, restored_site)
    active = sitemap.majority_site().name
    title = f"MirrorMaker failback: site {restored_site} restored"
    if restored_site != active:
        return Runbook(
            title,
            "The copy site is back: restart MirrorMaker 2 with the planned config.",
            [Step("Start MirrorMaker 2", note="It resumes from its stored source offsets.")],
        )
    other = copy_site(sitemap)
    host = sitemap.servers_on(other)[0]
    reverse = _mm2_change(sitemap, plans, host, (active, other), (other, active))
    back = _mm2_change(sitemap, plans, host, (other, active), (active, other))
    servers = _crossbeat_servers(sitemap, active)
    steps = [
        Step(
            f"Start site {active}'s brokers and drop their stale topics",
            ", ".join(s.name for s in sitemap.servers_on(active)),
            _deletes(sitemap, plans, active),
            note="The stale copies would interleave with the mirrored records' offsets.",
        ),
        Step(f"Mirror {other} -> {active} until it catches up", host.name, files=(reverse,)),
        _checkpoint_step(sitemap, plans, active),
        Step(
            f"Move production back to site {active}",
            ", ".join(s.name for s in servers),
            files=tuple(
                _client_change(sitemap, s, site_bootstrap(sitemap, other), None) for s in servers
            ),
            note=f"Stop the populator on site {other}, let MirrorMaker copy its last records, "
            f"start the populator and pipelines on site {active} from its checkpoint.",
        ),
        Step(
            f"Restore the planned direction {active} -> {other}",
            host.name,
            _deletes(sitemap, plans, other),
            (back,),
            f"Site {other}'s topics now hold the originals with different offsets: recreate "
            "them before mirroring into them again.",
        ),
    ]
    return Runbook(title, f"Site {active} becomes active again.", steps)
