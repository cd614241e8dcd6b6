"""The failover runbook: what to do, in order, when a site is lost for a while (seed 001).

Every runbook starts by confirming the loss and fencing the lost site. Then, chosen by
whether the surviving voters keep a majority of the metadata quorum (`keeps_quorum`), not
by the site's role label:

- quorum kept (the seed's "minority lost"): metadata step, move the topics onto the
  surviving brokers (per-site topics RF 4 -> 3), shrink the metadata quorum to the
  surviving voters;
- ZooKeeper quorum lost (the seed's "majority lost"): metadata step, promote the ZooKeeper
  observer to a voter, start a broker on the stand-by server with the surviving site's
  rack, bring partitions back online, move the topics onto the surviving brokers;
- KRaft quorum lost: the controller quorum cannot be rebuilt from a minority, so nothing
  that needs an active controller (elections, reassignments, new brokers) can follow: the
  runbook says so and stops.

The metadata step is chosen by counting the metadata service's members the same way
(`runbook.metadata_failover_steps`).
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
    fence_step,
    keeps_quorum,
    metadata_failover_steps,
    q,
    reassign_step,
    rf_note,
    shrink_assignment,
    split_site,
    standby_servers,
    verify_step,
    voter_tally,
    zk_change,
    zk_find_leader,
    zk_members,
    zk_start,
    zk_start_leader_first,
    zk_status,
    zk_stop,
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
    """Each topic's assignment once the failover runbook for `lost_site` is done.

    Shrunk onto the surviving brokers; after a ZooKeeper quorum loss the stand-by
    servers' temporary brokers count as survivors. After a KRaft quorum loss nothing can
    be reassigned: the planned assignment stays.
    """
    keeps = keeps_quorum(sitemap, lost_site)
    if not keeps and sitemap.cluster.quorum == "kraft":
        return _planned(plans)
    survivors = _surviving_brokers(sitemap, lost_site, with_standby=not keeps)
    return {
        p.name: shrink_assignment(p.assignment, survivors, p.durability.replication_factor)
        for p in plans
    }


def failover(sitemap: SiteMap, plans: Sequence[TopicPlan], lost_site: str) -> Runbook:
    """The ordered failover runbook for the temporary loss of `lost_site`."""
    lost, survivors = split_site(sitemap, lost_site)
    site = sitemap.site(lost_site)
    admin = Admin.outside(sitemap, lost_site)
    keeps = keeps_quorum(sitemap, lost_site)
    tally = voter_tally(sitemap, lost_site)
    names = ", ".join(s.name for s in lost)
    title = f"Failover: site {lost_site} ({site.role}) lost"
    steps = [
        confirm_step(sitemap, lost_site, admin),
        fence_step(sitemap, lost_site, lost, keeps),
        *metadata_failover_steps(sitemap, lost_site),
    ]
    if keeps:
        steps += _quorum_kept(sitemap, plans, lost_site, lost, survivors, admin)
        summary = (
            f"Lost: {names}. {tally}, a majority: the metadata quorum holds and writes "
            "continue on the surviving brokers; these steps restore fault tolerance there "
            "until the site comes back."
        )
    elif sitemap.cluster.quorum == "kraft":
        steps.append(_kraft_quorum_lost_step(sitemap, lost_site))
        summary = (
            f"Lost: {names}. Only {tally}: the KRaft controller quorum lost its majority "
            "and cannot be rebuilt; Kafka stays unavailable until the site's controllers "
            "return (then run failback)."
        )
        return Runbook(title, summary, steps)
    else:
        steps += _zookeeper_quorum_lost(sitemap, plans, lost_site, admin)
        summary = (
            f"Lost: {names}. Only {tally}: the ZooKeeper quorum lost its majority. Promote "
            "the surviving members to a new ensemble, then rebuild the Kafka cluster on the "
            "surviving brokers."
        )
    return Runbook(title, summary, [*steps, verify_step(admin)])


def _quorum_kept(
    sitemap: SiteMap,
    plans: Sequence[TopicPlan],
    lost_site: str,
    lost: Sequence[Server],
    survivors: Sequence[Server],
    admin: Admin,
) -> list[Step]:
    after_failover = failover_assignments(sitemap, plans, lost_site)
    steps = [
        reassign_step(
            sitemap,
            "Move every topic onto the surviving brokers",
            after_failover,
            admin,
            f"failover-{lost_site}",
            rf_note(_planned(plans), after_failover) + " " + _margin_note(plans, after_failover),
        ),
    ]
    if sitemap.cluster.quorum == "zookeeper":
        steps.append(_zookeeper_shrink_step(sitemap, lost_site))
    else:
        steps.append(_kraft_remove_step(sitemap, lost, survivors, admin))
    return steps


def _zookeeper_shrink_step(sitemap: SiteMap, lost_site: str) -> Step:
    voters, observers = zk_members(sitemap)
    after = (
        [v for v in voters if v.site != lost_site],
        [o for o in observers if o.site != lost_site],
    )
    members = [*after[0], *after[1]]
    commands = [zk_find_leader(sitemap, after[0])]
    commands += [zk_stop(sitemap, s) for s in members]
    commands += zk_start_leader_first(sitemap, members)
    commands += [zk_status(sitemap, s) for s in members]
    return Step(
        f"ZooKeeper: shrink the ensemble to {len(after[0])} voters",
        ", ".join(s.name for s in members),
        tuple(commands),
        tuple(zk_change(sitemap, s, (voters, observers), after) for s in members),
        # Restarting the survivors one at a time would, during each restart, leave fewer
        # live voters than either configuration needs: the pause is unavoidable with
        # static configuration, so the runbook says so instead of promising otherwise.
        "This pauses ZooKeeper: note the current leader, stop every surviving member, "
        "install the configs, start the former leader first and then the others. The first "
        "members to start elect the new leader, and the former leader holds every committed "
        "write, so it must be among them. ZooKeeper is unavailable from the first stop "
        "until a majority of the new ensemble runs, typically seconds. Partition leaders "
        "keep serving meanwhile, but leader elections and ISR changes wait for it, so "
        "acks=all writes stall if a replica falls behind; the brokers reconnect on their own.",
    )


def _margin_note(plans: Sequence[TopicPlan], after: dict[str, Assignment]) -> str:
    """Whether the shrunk acks=all topics still survive one more server loss."""
    short = [
        p.name
        for p in plans
        if p.durability.acks == "all"
        and min(map(len, after[p.name].values())) <= p.durability.min_insync_replicas
    ]
    if not short:
        return (
            "Partitions that lost copies get them back on surviving brokers, so one more "
            "server loss still leaves min.insync.replicas replicas for acks=all writes."
        )
    return (
        "Partitions that lost copies get them back on surviving brokers, but too few "
        f"brokers survive for a margin: {', '.join(short)} stop accepting acks=all writes "
        "at the next server loss."
    )


def _kraft_remove_step(
    sitemap: SiteMap, lost: Sequence[Server], survivors: Sequence[Server], admin: Admin
) -> Step:
    c = sitemap.cluster
    removed = [s for s in lost if s.runs("quorum")]
    controller = next((s for s in survivors if s.runs("quorum")), None)
    if controller is None:
        raise TopologyError("no KRaft voter survives: the controller quorum is lost")
    bootstrap = f"--bootstrap-controller {q(controller.endpoint(c.controller_port))}"
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


def _kraft_quorum_lost_step(sitemap: SiteMap, lost_site: str) -> Step:
    return Step(
        "KRaft: the controller quorum cannot be rebuilt from a minority; stop here",
        note=f"{voter_tally(sitemap, lost_site)}. add-controller/remove-controller need a "
        "quorum leader, and Kafka has no supported way to shrink a quorum that lost its "
        "majority. Without an active controller no partition gets a new leader, no "
        "reassignment runs and no broker can join, so Kafka stays unavailable for writes "
        f"and there is nothing more to do here. Bring back enough of site {lost_site}'s "
        f"controllers, then run `crossbeat topology failback MAP --restored {lost_site}`. "
        "To survive this loss next time, place voters on a third (witness) site so that no "
        "single site holds a majority of them.",
    )


def _zookeeper_quorum_lost(
    sitemap: SiteMap, plans: Sequence[TopicPlan], lost_site: str, admin: Admin
) -> list[Step]:
    steps = [_quorum_promotion_step(sitemap, lost_site)]
    cfg = sitemap.cluster.kafka_config_path
    for server in standby_servers(sitemap, lost_site):
        steps.append(
            Step(
                _temporary_broker_title(sitemap, server),
                server.name,
                (f"ssh {q(server.host)} kafka-server-start.sh -daemon {q(cfg)}",),
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
    after_failover = failover_assignments(sitemap, plans, lost_site)
    steps.append(
        reassign_step(
            sitemap,
            "Move every topic onto the surviving brokers",
            after_failover,
            admin,
            f"failover-{lost_site}",
            rf_note(_planned(plans), after_failover)
            + " Run once the partitions have leaders again (previous step).",
        )
    )
    return steps


def _temporary_broker_title(sitemap: SiteMap, server: Server) -> str:
    rack = f" (broker.rack={sitemap.rack_of(server)})" if sitemap.multi_site else ""
    return f"Start a Kafka broker on {server.name}{rack}"


def _quorum_promotion_step(sitemap: SiteMap, lost_site: str) -> Step:
    voters, observers = zk_members(sitemap)
    promoted = [s for s in [*voters, *observers] if s.site != lost_site]
    if not promoted:
        raise TopologyError(f"no ZooKeeper member survives the loss of site {lost_site!r}")
    commands = [zk_stop(sitemap, s) for s in promoted]
    commands += [zk_start(sitemap, s) for s in promoted]
    commands += [zk_status(sitemap, s) for s in promoted]
    return Step(
        f"ZooKeeper: promote the observer, ensemble of {len(promoted)} voters",
        ", ".join(s.name for s in promoted),
        tuple(commands),
        tuple(zk_change(sitemap, s, (voters, observers), (promoted, [])) for s in promoted),
        "Only once the lost site is fenced (above). Stop every surviving member, install "
        "the configs, start them all. The last ZooKeeper writes may be lost: leadership "
        "could not be enforced on this site.",
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
    bootstrap = q(admin.bootstrap)
    return Step(
        "Bring partitions back online",
        admin.name,
        (
            f"kafka-topics.sh --bootstrap-server {bootstrap} --describe --unavailable-partitions",
            f"kafka-leader-election.sh --bootstrap-server {bootstrap} --election-type unclean "
            "--topic TOPIC --partition N   # per partition still unavailable",
        ),
        note=note,
    )


def _planned(plans: Sequence[TopicPlan]) -> dict[str, Assignment]:
    return {p.name: p.assignment for p in plans}
