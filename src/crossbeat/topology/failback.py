"""The failback runbook: bring a restored site back into the planned topology (seed 001).

Both cases end in the planned state: the planned assignment (per-site topics back to RF 4),
the planned metadata quorum (observer back on the stand-by server) and preferred leaders.
The case is the failover's: whether the voters off the restored site kept a majority of
the metadata quorum (`keeps_quorum`), not the site's role label.

Order matters: the returning site's ZooKeeper and Kafka are kept stopped first; then the
quorum (brokers and reassignment need it), brokers next, data movement after, metadata
leadership last.
"""

from __future__ import annotations

from collections.abc import Sequence

from crossbeat.topology import render
from crossbeat.topology.failover import failover_assignments
from crossbeat.topology.plan import TopicPlan
from crossbeat.topology.runbook import (
    KAFKA_PROCESS,
    Admin,
    FileChange,
    Runbook,
    Step,
    keep_stopped_step,
    keeps_quorum,
    metadata_failback_steps,
    q,
    quorum_member,
    reassign_step,
    rf_note,
    split_site,
    standby_servers,
    stopped_then,
    verify_step,
    zk_change,
    zk_check_running,
    zk_members,
    zk_start,
    zk_status,
    zk_stop,
    zk_wipe,
)
from crossbeat.topology.sitemap import Server, SiteMap


def failback(sitemap: SiteMap, plans: Sequence[TopicPlan], restored_site: str) -> Runbook:
    """The ordered failback runbook once `restored_site` is reachable again."""
    restored, _ = split_site(sitemap, restored_site)
    site = sitemap.site(restored_site)
    admin = Admin.outside(sitemap, restored_site)
    keeps = keeps_quorum(sitemap, restored_site)
    kraft = sitemap.cluster.quorum == "kraft"
    steps = [keep_stopped_step(sitemap, restored_site, restored)]
    if kraft:
        steps.append(_kraft_step(sitemap, restored, keeps))
    else:
        steps.append(_zookeeper_step(sitemap, restored_site, keeps))
    brokers = _start_brokers_step(sitemap, restored)
    if brokers is not None:
        steps.append(brokers)
    planned = {p.name: p.assignment for p in plans}
    after_failover = failover_assignments(sitemap, plans, restored_site)
    if after_failover != planned:
        steps.append(
            reassign_step(
                sitemap,
                "Restore the planned assignment",
                planned,
                admin,
                f"failback-{restored_site}",
                rf_note(after_failover, planned)
                + " Copies stream to the restored brokers; add --throttle BYTES_PER_SEC to "
                "--execute to cap the inter-site traffic, and re-run --verify to lift it.",
            )
        )
    steps.append(
        Step(
            "Restore preferred leaders",
            admin.name,
            (
                f"kafka-leader-election.sh --bootstrap-server {q(admin.bootstrap)} "
                "--election-type preferred --all-topic-partitions",
            ),
        )
    )
    if not keeps and not kraft:
        # Only the ZooKeeper quorum-loss failover started temporary brokers.
        steps += _retire_standby_brokers(sitemap, restored_site, admin)
    steps += metadata_failback_steps(sitemap, restored_site)
    title = f"Failback: site {restored_site} ({site.role}) restored"
    summary = f"Restored: {', '.join(s.name for s in restored)}. Ends in the planned topology."
    return Runbook(title, summary, [*steps, verify_step(admin)])


def _zookeeper_step(sitemap: SiteMap, site: str, keeps: bool) -> Step:
    voters, observers = zk_members(sitemap)
    planned = (voters, observers)
    current: tuple[list[Server], list[Server]]
    if keeps:
        current = ([v for v in voters if v.site != site], [o for o in observers if o.site != site])
    else:
        # Failover promoted every surviving member to a voter.
        current = ([s for s in [*voters, *observers] if s.site != site], [])
    back = [s for s in [*voters, *observers] if s.site == site]
    running = [*current[0], *current[1]]
    # The running members that stay voters start first: every write the current ensemble
    # committed is on a majority of them, so the leader they elect has it all; the wiped
    # members join that leader, the members turning into observers last.
    first = [s for s in running if s.runs("quorum")]
    last = [s for s in running if not s.runs("quorum")]
    commands = [zk_wipe(sitemap, s) for s in back]
    commands += [zk_stop(sitemap, s) for s in running]
    commands += [zk_start(sitemap, s) for s in first]
    commands += [zk_check_running(s) for s in first]
    commands += [zk_start(sitemap, s) for s in back]
    commands += [zk_start(sitemap, s) for s in last]
    commands += [zk_status(sitemap, s) for s in [*running, *back]]
    return Step(
        f"ZooKeeper: back to {len(voters)} voters and {len(observers)} observer(s)",
        ", ".join(s.name for s in [*running, *back]),
        tuple(commands),
        tuple(zk_change(sitemap, s, current, planned) for s in running),
        "The restored members keep their planned zoo.cfg but their data is stale, possibly "
        "divergent: each wipe command stops ZooKeeper and refuses to wipe while it still "
        "runs, so they sync from the current leader. Then stop the running members, install "
        "their configs and start everyone in the order given; start the wiped members only "
        "once every check before them printed nothing, so that the members holding the "
        "data take part in the first election. ZooKeeper is unavailable from "
        "the first stop until a majority of the planned voters runs (Kafka's partition "
        "leaders keep serving meanwhile; elections and ISR changes wait).",
    )


def _kraft_step(sitemap: SiteMap, restored: Sequence[Server], keeps: bool) -> Step:
    c = sitemap.cluster
    controllers = [s for s in restored if s.runs("quorum")]
    observers = [s for s in restored if s.runs("quorum-observer")]
    start_observers = [
        f"ssh {q(s.host)} kafka-server-start.sh -daemon {q(_kraft_config(sitemap, s))}"
        for s in observers
    ]
    if not keeps:
        return Step(
            "KRaft: restart the lost controllers",
            ", ".join(s.name for s in [*controllers, *observers]),
            tuple(
                f"ssh {q(s.host)} kafka-server-start.sh -daemon {q(_kraft_config(sitemap, s))}"
                for s in controllers
            )
            + tuple(start_observers),
            note="The quorum never changed (a quorum without its majority cannot be "
            "reconfigured): it resumes once a majority of its voters is back. Servers that "
            "also run a broker start it with their controller.",
        )
    commands = []
    for s in controllers:
        cfg = _kraft_config(sitemap, s)
        wipe = " ".join(
            q(f"{c.kafka_log_dirs}/{name}") for name in ("__cluster_metadata-0", "meta.properties")
        )
        commands += [
            stopped_then(
                s, "kafka-server-stop.sh", KAFKA_PROCESS, f"Kafka on {s.name}", f"rm -rf {wipe}"
            ),
            f"ssh {q(s.host)} {render.kraft_format_command(sitemap, s, cfg, initial_voter=False)}",
            f"ssh {q(s.host)} kafka-server-start.sh -daemon {q(cfg)}",
            f"ssh {q(s.host)} kafka-metadata-quorum.sh --command-config {q(cfg)} "
            f"--bootstrap-controller localhost:{c.controller_port} add-controller",
        ]
    return Step(
        "KRaft: add the restored controllers back as voters",
        ", ".join(s.name for s in [*controllers, *observers]),
        tuple(commands + start_observers),
        note="They were removed at failover: reformat them as observers (each wipe command "
        "refuses to run while Kafka still does), let them catch up, then add them to the "
        "voter set one at a time. Servers that also run a broker start it with their "
        "controller.",
    )


def _kraft_config(sitemap: SiteMap, server: Server) -> str:
    if server.runs("broker"):
        return sitemap.cluster.kafka_config_path
    return render.CONTROLLER_CONFIG_PATH


def _start_brokers_step(sitemap: SiteMap, restored: Sequence[Server]) -> Step | None:
    kraft = sitemap.cluster.quorum == "kraft"
    # A KRaft server running a controller and a broker is one process, started above.
    brokers = [
        s for s in restored if s.runs("broker") and not (kraft and quorum_member(sitemap, s))
    ]
    if not brokers:
        return None
    cfg = q(sitemap.cluster.kafka_config_path)
    return Step(
        "Start the restored brokers",
        ", ".join(s.name for s in brokers),
        tuple(f"ssh {q(s.host)} kafka-server-start.sh -daemon {cfg}" for s in brokers),
        note="Their old replicas truncate to the current leaders' logs (unclean election "
        "is disabled, so nothing they hold alone is kept).",
    )


def _retire_standby_brokers(sitemap: SiteMap, restored_site: str, admin: Admin) -> list[Step]:
    steps = []
    cfg = sitemap.cluster.kafka_config_path
    for s in standby_servers(sitemap, restored_site):
        before = render.broker_properties(sitemap, s, as_broker=True)
        steps.append(
            Step(
                f"Stop the temporary broker on {s.name}",
                s.name,
                (
                    f"kafka-log-dirs.sh --bootstrap-server {q(admin.bootstrap)} --describe "
                    f"--broker-list {s.id}   # must list no partitions",
                    f"ssh {q(s.host)} kafka-server-stop.sh",
                ),
                (FileChange(s.name, cfg, before, ""),),
                "The planned assignment holds no replica on it; stop it only once the "
                "reassignment completed.",
            )
        )
    return steps
