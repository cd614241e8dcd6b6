"""Runbooks for a temporary site loss (seed 001): ordered steps with commands and diffs.

Each step names the server it runs on, the concrete commands, and config changes as unified
diffs. Minority and majority losses follow the seed's procedures:

- minority lost: remove metadata leader enforcement, shrink the per-site topics onto the
  surviving brokers (RF 4 -> 3), shrink the metadata quorum to the surviving voters;
- majority lost: promote the metadata warm stand-by, promote the ZooKeeper observer to a
  voter (quorum of the surviving servers), start a broker on the stand-by server with the
  surviving site's rack, shrink the topics onto the surviving brokers.

This module holds the runbook model and the steps both directions share; the procedures
are in `failover` and `failback`, the MirrorMaker alternative in `mirrormaker`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from crossbeat.topology import render
from crossbeat.topology.bundle import admin_server, reassignment_document
from crossbeat.topology.errors import TopologyError
from crossbeat.topology.placement import Assignment
from crossbeat.topology.sitemap import Server, SiteMap


@dataclass(frozen=True)
class Admin:
    """The broker admin commands run on, and the bootstrap address they use."""

    name: str
    host: str
    bootstrap: str

    @classmethod
    def outside(cls, sitemap: SiteMap, site: str) -> Admin:
        server = admin_server(sitemap, exclude_site=site)
        return cls(server.name, server.host, f"{server.host}:{sitemap.cluster.broker_port}")


@dataclass(frozen=True)
class FileChange:
    """A config file to install on `server`; `before` is "" for a new file."""

    server: str
    path: str
    before: str
    after: str

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.before.splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                f"{self.server}:{self.path} (before)",
                f"{self.server}:{self.path} (after)",
            )
        )


@dataclass(frozen=True)
class Step:
    title: str
    where: str = ""
    commands: tuple[str, ...] = ()
    files: tuple[FileChange, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Runbook:
    title: str
    summary: str
    steps: list[Step] = field(default_factory=list)

    def to_text(self) -> str:
        out = [f"# {self.title}", "", self.summary, ""]
        for i, step in enumerate(self.steps, 1):
            where = f" (on {step.where})" if step.where else ""
            out.append(f"## {i}. {step.title}{where}")
            if step.note:
                out += ["", step.note]
            for change in step.files:
                verb = "remove" if not change.after else "install"
                out += [
                    "",
                    f"{verb} {change.path} on {change.server}:",
                    "```diff",
                    change.diff().rstrip("\n"),
                    "```",
                ]
            if step.commands:
                out += ["", "```sh", *step.commands, "```"]
            out.append("")
        return "\n".join(out)


def shrink_assignment(assignment: Assignment, survivors: Sequence[int], rf: int) -> Assignment:
    """Each partition on `survivors` only, with min(rf, len(survivors)) replicas.

    Surviving replicas keep their order (so a surviving preferred leader stays leader);
    missing copies go to the surviving broker with the fewest replicas so far (lowest id
    on ties), which keeps the result deterministic and balanced.
    """
    if not survivors:
        raise TopologyError("no surviving broker to move the replicas to")
    target = min(rf, len(survivors))
    alive = set(survivors)
    load = dict.fromkeys(sorted(survivors), 0)
    result: Assignment = {}
    for p in sorted(assignment):
        replicas = [b for b in assignment[p] if b in alive][:target]
        while len(replicas) < target:
            replicas.append(min((b for b in load if b not in replicas), key=lambda b: (load[b], b)))
        for b in replicas:
            load[b] += 1
        result[p] = replicas
    return result


def reassign_step(
    sitemap: SiteMap,
    title: str,
    assignments: dict[str, Assignment],
    admin: Admin,
    name: str,
    note: str,
) -> Step:
    path = f"/tmp/crossbeat-{name}.json"
    bootstrap = f"--bootstrap-server {admin.bootstrap}"
    return Step(
        title,
        admin.name,
        (
            f"kafka-reassign-partitions.sh {bootstrap} --reassignment-json-file {path} --execute",
            f"kafka-reassign-partitions.sh {bootstrap} --reassignment-json-file {path} --verify",
        ),
        (FileChange(admin.name, path, "", reassignment_document(assignments)),),
        note,
    )


def zk_members(sitemap: SiteMap) -> tuple[list[Server], list[Server]]:
    voters = [s for s in sitemap.servers if s.runs("quorum")]
    observers = [s for s in sitemap.servers if s.runs("quorum-observer")]
    return voters, observers


def zk_change(
    sitemap: SiteMap,
    server: Server,
    before: tuple[Sequence[Server], Sequence[Server]],
    after: tuple[Sequence[Server], Sequence[Server]],
) -> FileChange:
    return FileChange(
        server.name,
        sitemap.cluster.zookeeper_config_path,
        render.zookeeper_config(sitemap, server, *before),
        render.zookeeper_config(sitemap, server, *after),
    )


def zk_restart(sitemap: SiteMap, server: Server) -> tuple[str, ...]:
    cfg = sitemap.cluster.zookeeper_config_path
    port = sitemap.cluster.zookeeper_client_port
    return (
        f"ssh {server.host} zkServer.sh restart {cfg}",
        f"echo srvr | nc {server.host} {port}   # Mode: leader/follower/observer",
    )


def split_site(sitemap: SiteMap, site: str) -> tuple[list[Server], list[Server]]:
    sitemap.site(site)  # raises on an unknown site
    lost = sitemap.servers_on(site)
    survivors = [s for s in sitemap.servers if s.site != site]
    if not any(s.runs("broker") for s in survivors) and not any(
        s.runs("quorum-observer") or s.runs("metadata-standby") for s in survivors
    ):
        raise TopologyError(f"nothing survives the loss of site {site!r}")
    return lost, survivors


def confirm_step(sitemap: SiteMap, site: str, admin: Admin) -> Step:
    return Step(
        "Confirm the loss and what it does",
        admin.name,
        (
            f"crossbeat topology check MAP   # scenario: site {site}",
            f"kafka-topics.sh --bootstrap-server {admin.bootstrap} --describe --under-replicated-partitions",
            f"kafka-topics.sh --bootstrap-server {admin.bootstrap} --describe --unavailable-partitions",
        ),
        note="Proceed only for a loss expected to last: every step below is undone by failback.",
    )


def verify_step(admin: Admin) -> Step:
    return Step(
        "Verify",
        admin.name,
        (
            f"kafka-topics.sh --bootstrap-server {admin.bootstrap} --describe --under-min-isr-partitions",
            f"kafka-topics.sh --bootstrap-server {admin.bootstrap} --describe --unavailable-partitions",
            "crossbeat topology check MAP",
        ),
        note="Both kafka-topics listings must be empty.",
    )


def rf_note(before: Mapping[str, Assignment], after: Mapping[str, Assignment]) -> str:
    """ "Replication factor: T 4 -> 3, ..." for the topics whose replication factor changes."""
    changes = []
    for topic, assignment in after.items():
        old = max(map(len, before[topic].values()))
        new = max(map(len, assignment.values()))
        if old != new:
            changes.append(f"{topic} {old} -> {new}")
    return (
        f"Replication factor: {', '.join(changes)}."
        if changes
        else "Replication factors unchanged."
    )


def metadata_step(title: str, servers: Sequence[Server], note: str) -> Step:
    return Step(title, ", ".join(s.name for s in servers), note=note)


def standby_servers(sitemap: SiteMap, lost_site: str) -> list[Server]:
    """Surviving stand-by servers (observer or metadata stand-by, no broker) off witness sites."""
    return [
        s
        for s in sitemap.servers
        if s.site != lost_site
        and sitemap.site(s.site).role != "witness"
        and not s.runs("broker")
        and (s.runs("quorum-observer") or s.runs("metadata-standby"))
    ]
