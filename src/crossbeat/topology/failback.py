"""The failback runbook: bring a restored site back into the planned topology (seed 001).

Both cases end in the planned state: the planned assignment (per-site topics back to RF 4),
the planned metadata quorum (observer back on the stand-by server) and preferred leaders.
Order matters: the quorum first (brokers and reassignment need it), brokers next, data
movement after, metadata leadership last.
"""

from __future__ import annotations

from collections.abc import Sequence

from crossbeat.topology import render
from crossbeat.topology.failover import failover_assignments
from crossbeat.topology.plan import TopicPlan
from crossbeat.topology.runbook import (
    Admin,
    FileChange,
    Runbook,
    Step,
    metadata_step,
    reassign_step,
    rf_note,
    split_site,
    standby_servers,
    verify_step,
    zk_change,
    zk_members,
    zk_restart,
)
from crossbeat.topology.sitemap import Server, SiteMap


def failback(sitemap: SiteMap, plans: Sequence[TopicPlan], restored_site: str) -> Runbook:
    """The ordered failback runbook once `restored_site` is reachable again."""
    restored, survivors = split_site(sitemap, restored_site)
    site = sitemap.site(restored_site)
    admin = Admin.outside(sitemap, restored_site)
    majority = site.role == "majority"
    steps = [_quorum_step(sitemap, restored_site, restored, majority, admin)]
    steps.append(_start_brokers_step(sitemap, restored))
    planned = {p.name: p.assignment for p in plans}
    steps.append(
        reassign_step(
            sitemap,
            "Restore the planned assignment",
            planned,
            admin,
            f"failback-{restored_site}",
            rf_note(failover_assignments(sitemap, plans, restored_site), planned)
            + " Copies stream to the restored brokers; add --throttle BYTES_PER_SEC to "
            "--execute to cap the inter-site traffic, and re-run --verify to lift it.",
        )
    )
    steps.append(
        Step(
            "Restore preferred leaders",
            admin.name,
            (
                f"kafka-leader-election.sh --bootstrap-server {admin.bootstrap} "
                "--election-type preferred --all-topic-partitions",
            ),
        )
    )
    if majority:
        steps += _retire_standby_brokers(sitemap, restored_site, admin)
        steps.append(
            metadata_step(
                "Metadata: hand leadership back to the majority site",
                [s for s in restored if s.runs("metadata")],
                "Run the metadata service's failback procedure; the stand-by returns to "
                "warm stand-by.",
            )
        )
    else:
        steps.append(
            metadata_step(
                "Metadata: re-enable leader enforcement",
                [s for s in survivors if s.runs("metadata")],
                "Undo the failover's change (seed 001; see the metadata service's documentation).",
            )
        )
    title = f"Failback: site {restored_site} ({site.role}) restored"
    summary = f"Restored: {', '.join(s.name for s in restored)}. Ends in the planned topology."
    return Runbook(title, summary, [*steps, verify_step(admin)])


def _quorum_step(
    sitemap: SiteMap, site: str, restored: Sequence[Server], majority: bool, admin: Admin
) -> Step:
    c = sitemap.cluster
    if c.quorum == "kraft":
        return _kraft_step(sitemap, restored, majority)
    voters, observers = zk_members(sitemap)
    planned = (voters, observers)
    current: tuple[list[Server], list[Server]]
    if majority:
        # Failover promoted every surviving member to a voter.
        current = ([s for s in [*voters, *observers] if s.site != site], [])
    else:
        current = ([v for v in voters if v.site != site], [o for o in observers if o.site != site])
    back = [s for s in [*voters, *observers] if s.site == site]
    running = [*current[0], *current[1]]
    # Voters first, the promoted observer last: it leaves the vote only once the planned
    # voters form a quorum again.
    running.sort(key=lambda s: s.runs("quorum-observer"))
    commands = [f"ssh {s.host} rm -rf {c.zookeeper_data_dir}/version-2" for s in back]
    commands += [
        cmd for s in running if not s.runs("quorum-observer") for cmd in zk_restart(sitemap, s)
    ]
    commands += [f"ssh {s.host} zkServer.sh start {c.zookeeper_config_path}" for s in back]
    commands += [
        cmd for s in running if s.runs("quorum-observer") for cmd in zk_restart(sitemap, s)
    ]
    return Step(
        f"ZooKeeper: back to {len(voters)} voters and {len(observers)} observer(s)",
        ", ".join(s.name for s in [*running, *back]),
        tuple(commands),
        tuple(zk_change(sitemap, s, current, planned) for s in running),
        "The restored members keep their planned zoo.cfg but their data is stale, possibly "
        "divergent: wipe it so they sync from the current leader. Roll the running members "
        "one at a time in the order given; the ensemble may pause until the restored members "
        "start.",
    )


def _kraft_step(sitemap: SiteMap, restored: Sequence[Server], majority: bool) -> Step:
    c = sitemap.cluster
    controllers = [s for s in restored if s.runs("quorum")]
    if majority:
        return Step(
            "KRaft: restart the lost controllers",
            ", ".join(s.name for s in controllers),
            tuple(
                f"ssh {s.host} kafka-server-start.sh -daemon {c.kafka_config_path}"
                for s in controllers
            ),
            note="The quorum never changed (a quorum without its majority cannot be "
            "reconfigured): it resumes once a majority of its voters is back.",
        )
    commands = []
    for s in controllers:
        cfg = c.kafka_config_path
        commands += [
            f"ssh {s.host} rm -rf {c.kafka_log_dirs}/__cluster_metadata-0 {c.kafka_log_dirs}/meta.properties",
            f"ssh {s.host} {render.kraft_format_command(sitemap, s, cfg, initial_voter=False)}",
            f"ssh {s.host} kafka-server-start.sh -daemon {cfg}",
            f"ssh {s.host} kafka-metadata-quorum.sh --command-config {cfg} "
            f"--bootstrap-controller localhost:{c.controller_port} add-controller",
        ]
    return Step(
        "KRaft: add the restored controllers back as voters",
        ", ".join(s.name for s in controllers),
        tuple(commands),
        note="They were removed at failover: reformat them as observers, let them catch up, "
        "then add them to the voter set one at a time.",
    )


def _start_brokers_step(sitemap: SiteMap, restored: Sequence[Server]) -> Step:
    brokers = [s for s in restored if s.runs("broker")]
    cfg = sitemap.cluster.kafka_config_path
    return Step(
        "Start the restored brokers",
        ", ".join(s.name for s in brokers),
        tuple(f"ssh {s.host} kafka-server-start.sh -daemon {cfg}" for s in brokers),
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
                    f"kafka-log-dirs.sh --bootstrap-server {admin.bootstrap} --describe "
                    f"--broker-list {s.id}   # must list no partitions",
                    f"ssh {s.host} kafka-server-stop.sh",
                ),
                (FileChange(s.name, cfg, before, ""),),
                "The planned assignment holds no replica on it; stop it only once the "
                "reassignment completed.",
            )
        )
    return steps
