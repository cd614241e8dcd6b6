"""The failover runbook: what to do, in order, when a site is lost for a while (seed 001).

- minority lost: remove metadata leader enforcement, move the topics onto the surviving
  brokers (per-site topics RF 4 -> 3), shrink the metadata quorum to the surviving voters;
- majority lost: promote the metadata warm stand-by, promote the ZooKeeper observer to a
  voter, start a broker on the stand-by server with the surviving site's rack, bring
  partitions back online, move the topics onto the surviving brokers.
"""

from __future__ import annotations

from collections.abc import Sequence

from crossbeat.topology import render
from crossbeat.topology.errors import TopologyError
from crossbeat.topology.placement import Assignment
from crossbeat.topology.plan import TopicPlan
from crossbeat.topology.runbook import (
    Admin,
    FileChange,
    Runbook,
    Step,
    confirm_step,
    metadata_step,
    reassign_step,
    rf_note,
    shrink_assignment,
    split_site,
    standby_servers,
    verify_step,
    zk_change,
    zk_members,
    zk_restart,
)
from crossbeat.topology.sitemap import Server, SiteMap


def _surviving_brokers(sitemap: SiteMap, lost_site: str, *, with_standby: bool) -> list[int]:
    ids = [b.id for b in sitemap.brokers() if b.site != lost_site]
    if with_standby:
        ids += [s.id for s in standby_servers(sitemap, lost_site)]
    return sorted(ids)


def failover_assignments(
    sitemap: SiteMap, plans: Sequence[TopicPlan], lost_site: str
) -> dict[str, Assignment]:
    """Each topic shrunk onto the brokers that remain after failover from `lost_site`.

    After a majority loss the stand-by servers' temporary brokers count as survivors.
    """
    majority = sitemap.site(lost_site).role == "majority"
    survivors = _surviving_brokers(sitemap, lost_site, with_standby=majority)
    return {
        p.name: shrink_assignment(p.assignment, survivors, p.durability.replication_factor)
        for p in plans
    }


def failover(sitemap: SiteMap, plans: Sequence[TopicPlan], lost_site: str) -> Runbook:
    """The ordered failover runbook for the temporary loss of `lost_site`."""
    lost, survivors = split_site(sitemap, lost_site)
    site = sitemap.site(lost_site)
    admin = Admin.outside(sitemap, lost_site)
    title = f"Failover: site {lost_site} ({site.role}) lost"
    if site.role == "majority":
        steps = _majority_failover(sitemap, plans, lost_site, survivors, admin)
        summary = (
            f"Lost: {', '.join(s.name for s in lost)}. The metadata quorum lost its majority: "
            "promote the stand-by, then rebuild the Kafka cluster on the surviving site."
        )
    else:
        steps = _minority_failover(sitemap, plans, lost_site, lost, survivors, admin)
        summary = (
            f"Lost: {', '.join(s.name for s in lost)}. Writes continue on the majority site; "
            "these steps restore fault tolerance there until the site comes back."
        )
    return Runbook(
        title, summary, [confirm_step(sitemap, lost_site, admin), *steps, verify_step(admin)]
    )


def _minority_failover(
    sitemap: SiteMap,
    plans: Sequence[TopicPlan],
    lost_site: str,
    lost: Sequence[Server],
    survivors: Sequence[Server],
    admin: Admin,
) -> list[Step]:
    metadata = [s for s in survivors if s.runs("metadata")]
    steps = [
        metadata_step(
            "Metadata: remove leader enforcement",
            metadata,
            "Let the metadata leader run without the lost site's members (seed 001; see the "
            "metadata service's documentation). The embedded SQLite store has nothing to change.",
        ),
        reassign_step(
            sitemap,
            "Move every topic onto the surviving brokers",
            failover_assignments(sitemap, plans, lost_site),
            admin,
            f"failover-{lost_site}",
            rf_note(_planned(plans), failover_assignments(sitemap, plans, lost_site))
            + " Partitions that lost copies get them back on surviving brokers, so one more "
            "server loss still leaves min.insync.replicas replicas for acks=all writes.",
        ),
    ]
    if sitemap.cluster.quorum == "zookeeper":
        voters, observers = zk_members(sitemap)
        after = (
            [v for v in voters if v.site != lost_site],
            [o for o in observers if o.site != lost_site],
        )
        members = [*after[0], *after[1]]
        steps.append(
            Step(
                f"ZooKeeper: shrink the ensemble to {len(after[0])} voters",
                ", ".join(s.name for s in members),
                tuple(c for s in members for c in zk_restart(sitemap, s)),
                tuple(zk_change(sitemap, s, (voters, observers), after) for s in members),
                "Restart one server at a time, the leader (Mode: leader) last; the quorum "
                "holds throughout since the lost members are down.",
            )
        )
    else:
        steps.append(_kraft_remove_step(sitemap, lost, survivors, admin))
    return steps


def _kraft_remove_step(
    sitemap: SiteMap, lost: Sequence[Server], survivors: Sequence[Server], admin: Admin
) -> Step:
    c = sitemap.cluster
    removed = [s for s in lost if s.runs("quorum")]
    controller = next(s for s in survivors if s.runs("quorum"))
    bootstrap = f"--bootstrap-controller {controller.host}:{c.controller_port}"
    commands = [f"kafka-metadata-quorum.sh {bootstrap} describe --replication"]
    commands += [
        f"kafka-metadata-quorum.sh {bootstrap} remove-controller --controller-id {s.id} "
        f"--controller-directory-id {render.kafka_uuid(c.name, s.name, 'metadata')}"
        for s in removed
    ]
    return Step(
        f"KRaft: remove the lost voters ({', '.join(s.name for s in removed)})",
        admin.name,
        tuple(commands),
        note="Directory ids are the ones the plan formatted the voters with; check them "
        "against `describe --replication`.",
    )


def _majority_failover(
    sitemap: SiteMap,
    plans: Sequence[TopicPlan],
    lost_site: str,
    survivors: Sequence[Server],
    admin: Admin,
) -> list[Step]:
    standby = standby_servers(sitemap, lost_site)
    steps = [
        metadata_step(
            "Metadata: promote the warm stand-by",
            [s for s in survivors if s.runs("metadata-standby")],
            "Run the metadata service's promotion procedure (seed 001) before anything "
            "writes: the gateway and populator need a metadata leader.",
        ),
        _quorum_promotion_step(sitemap, lost_site),
    ]
    for server in standby:
        cfg = sitemap.cluster.kafka_config_path
        steps.append(
            Step(
                f"Start a Kafka broker on {server.name} (broker.rack={sitemap.rack_of(server)})",
                server.name,
                (f"ssh {server.host} kafka-server-start.sh -daemon {cfg}",),
                (
                    FileChange(
                        server.name,
                        cfg,
                        "",
                        render.broker_properties(sitemap, server, plans, as_broker=True),
                    ),
                ),
                "A third broker on the surviving site lets RF 3 and min.insync.replicas=2 "
                "survive one more server loss.",
            )
        )
    steps.append(_offline_step(sitemap, plans, lost_site, admin))
    steps.append(
        reassign_step(
            sitemap,
            "Move every topic onto the surviving brokers",
            failover_assignments(sitemap, plans, lost_site),
            admin,
            f"failover-{lost_site}",
            rf_note(_planned(plans), failover_assignments(sitemap, plans, lost_site))
            + " Run once the partitions have leaders again (previous step).",
        )
    )
    return steps


def _quorum_promotion_step(sitemap: SiteMap, lost_site: str) -> Step:
    if sitemap.cluster.quorum == "kraft":
        return Step(
            "KRaft: the controller quorum cannot be rebuilt from a minority",
            note="add-controller/remove-controller need a quorum leader, and Kafka has no "
            "supported way to shrink a quorum that lost its majority. Bring back enough of "
            f"site {lost_site}'s controllers, or place voters on a third (witness) site "
            "so that no single site holds a majority of them.",
        )
    voters, observers = zk_members(sitemap)
    promoted = [s for s in [*voters, *observers] if s.site != lost_site]
    if not promoted:
        raise TopologyError(f"no ZooKeeper member survives the loss of site {lost_site!r}")
    commands = [
        f"ssh {s.host} zkServer.sh stop {sitemap.cluster.zookeeper_config_path}" for s in promoted
    ]
    commands += [
        f"ssh {s.host} zkServer.sh start {sitemap.cluster.zookeeper_config_path}" for s in promoted
    ]
    commands += [
        f"echo srvr | nc {s.host} {sitemap.cluster.zookeeper_client_port}" for s in promoted
    ]
    return Step(
        f"ZooKeeper: promote the observer, ensemble of {len(promoted)} voters",
        ", ".join(s.name for s in promoted),
        tuple(commands),
        tuple(zk_change(sitemap, s, (voters, observers), (promoted, [])) for s in promoted),
        "Stop every surviving member, install the configs, start them all. The last "
        "ZooKeeper writes may be lost: leadership could not be enforced on this site.",
    )


def _offline_step(
    sitemap: SiteMap, plans: Sequence[TopicPlan], lost_site: str, admin: Admin
) -> Step:
    lost_ids = {b.id for b in sitemap.brokers() if b.site == lost_site}
    gone = [
        f"{p.name}-{n}"
        for p in plans
        for n, replicas in sorted(p.assignment.items())
        if set(replicas) <= lost_ids
    ]
    note = (
        "Partitions whose surviving replicas were all out of sync stay listed as unavailable. "
        "Electing one anyway (unclean) drops the records only the lost site held: do it only "
        "for the partitions listed, and for acks=all topics record which ones."
    )
    if gone:
        note += f" No replica survives for: {', '.join(gone)}; recreate them (replayable workflows only)."
    return Step(
        "Bring partitions back online",
        admin.name,
        (
            f"kafka-topics.sh --bootstrap-server {admin.bootstrap} --describe --unavailable-partitions",
            f"kafka-leader-election.sh --bootstrap-server {admin.bootstrap} --election-type unclean "
            "--topic TOPIC --partition N   # per partition still unavailable",
        ),
        note=note,
    )


def _planned(plans: Sequence[TopicPlan]) -> dict[str, Assignment]:
    return {p.name: p.assignment for p in plans}
