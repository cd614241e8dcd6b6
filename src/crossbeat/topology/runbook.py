"""Runbooks for a temporary site loss (seed 001): ordered steps with commands and diffs.

Each step names the server it runs on, the concrete commands, and config changes as unified
diffs. Which procedure applies is decided by counting, not by the site's role label:

- the surviving voters keep a majority of the metadata quorum (ZooKeeper or KRaft): the
  seed's "minority lost" procedure: shrink the per-site topics onto the surviving brokers
  (RF 4 -> 3), shrink the metadata quorum to the surviving voters;
- they do not: the seed's "majority lost" procedure: promote the ZooKeeper observer to a
  voter (quorum of the surviving servers), start a broker on the stand-by server with the
  surviving site's rack, shrink the topics onto the surviving brokers. A KRaft quorum that
  lost its majority cannot be rebuilt: that runbook stops after saying so.

The crossbeat metadata service is counted the same way over the servers running
`metadata`: leader enforcement is removed while most of them survive, the warm stand-by is
promoted otherwise. A failover always starts by fencing the lost site (a partitioned site
keeps running), a failback by keeping the returning site's ZooKeeper and Kafka stopped
until their step; data directories are wiped only by a command that first checks the
process is gone.

This module holds the runbook model and the steps both directions share; the procedures
are in `failover` and `failback`, the MirrorMaker alternative in `mirrormaker`.
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from crossbeat.topology import render
from crossbeat.topology.bundle import admin_server, reassignment_document
from crossbeat.topology.errors import TopologyError
from crossbeat.topology.placement import Assignment
from crossbeat.topology.sitemap import Server, SiteMap, quorum_survives

q = shlex.quote
# pgrep patterns for the two JVMs; the brackets keep pgrep -f from matching the remote
# shell whose own command line contains the pattern.
ZOOKEEPER_PROCESS = "[Q]uorumPeerMain"
KAFKA_PROCESS = "[k]afka[.]Kafka"


@dataclass(frozen=True)
class Admin:
    """The broker admin commands run on, and the bootstrap address they use."""

    name: str
    host: str
    bootstrap: str

    @classmethod
    def outside(cls, sitemap: SiteMap, site: str) -> Admin:
        server = admin_server(sitemap, exclude_site=site)
        return cls(server.name, server.host, server.endpoint(sitemap.cluster.broker_port))


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
    bootstrap = f"--bootstrap-server {q(admin.bootstrap)}"
    return Step(
        title,
        admin.name,
        (
            f"kafka-reassign-partitions.sh {bootstrap} --reassignment-json-file {q(path)} --execute",
            f"kafka-reassign-partitions.sh {bootstrap} --reassignment-json-file {q(path)} --verify",
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


def zk_config(sitemap: SiteMap) -> str:
    return q(sitemap.cluster.zookeeper_config_path)


def zk_stop(sitemap: SiteMap, server: Server) -> str:
    return f"ssh {q(server.host)} zkServer.sh stop {zk_config(sitemap)}"


def zk_start(sitemap: SiteMap, server: Server) -> str:
    return f"ssh {q(server.host)} zkServer.sh start {zk_config(sitemap)}"


def zk_status(sitemap: SiteMap, server: Server) -> str:
    port = sitemap.cluster.zookeeper_client_port
    return f"echo srvr | nc {q(server.host)} {port}   # Mode: leader/follower/observer"


def zk_find_leader(sitemap: SiteMap, members: Sequence[Server]) -> str:
    """Shell: set LEADER to the member answering `Mode: leader` (it holds every commit)."""
    hosts = " ".join(q(s.host) for s in members)
    port = sitemap.cluster.zookeeper_client_port
    return (
        f'LEADER=$(for h in {hosts}; do echo srvr | nc -w 3 "$h" {port} '
        '| grep -q \'Mode: leader\' && echo "$h"; done); echo "leader: ${LEADER:?none found}"'
    )


def zk_start_leader_first(sitemap: SiteMap, members: Sequence[Server]) -> list[str]:
    """Start $LEADER (see `zk_find_leader`), then the other members."""
    hosts = " ".join(q(s.host) for s in members)
    cfg = zk_config(sitemap)
    return [
        f'ssh "$LEADER" zkServer.sh start {cfg}',
        f'for h in {hosts}; do [ "$h" = "$LEADER" ] || ssh "$h" zkServer.sh start {cfg}; done',
    ]


def zk_check_running(server: Server) -> str:
    return (
        f"ssh {q(server.host)} pgrep -f {q(ZOOKEEPER_PROCESS)} >/dev/null "
        f"|| echo {q(f'ZooKeeper is not running on {server.name}')}"
    )


def wait_stopped(pattern: str, what: str, seconds: int) -> str:
    """Shell text: wait up to `seconds` for no process to match `pattern`, else exit 1.

    Double quotes inside, so that `stopped_then` can single-quote the whole remote command
    readably: `pattern` and `what` hold no `"`, `$` or backquote (names are validated).
    """
    return (
        f'n=0; while pgrep -f "{pattern}" >/dev/null; do n=$((n+1)); '
        f'if [ $n -ge {seconds} ]; then echo "{what} is still running" >&2; exit 1; fi; '
        "sleep 1; done"
    )


def stopped_then(server: Server, stop: str, pattern: str, what: str, then: str) -> str:
    """`ssh` running `stop`, checking `pattern` is gone, and only then `then` (a wipe)."""
    remote = f"{stop}; {wait_stopped(pattern, what, 60)}; {then}"
    return f"ssh {q(server.host)} {q(remote)}"


def zk_wipe(sitemap: SiteMap, server: Server) -> str:
    """Stop ZooKeeper on `server`, check it is gone, then wipe its data (not before)."""
    data = q(f"{sitemap.cluster.zookeeper_data_dir}/version-2")
    return stopped_then(
        server,
        f"zkServer.sh stop {zk_config(sitemap)}",
        ZOOKEEPER_PROCESS,
        f"ZooKeeper on {server.name}",
        f"rm -rf {data}",
    )


def quorum_member(sitemap: SiteMap, server: Server) -> bool:
    return server.runs("quorum") or server.runs("quorum-observer")


def keeps_quorum(sitemap: SiteMap, site: str) -> bool:
    """Whether the voters off `site` keep a majority of the metadata quorum."""
    return quorum_survives(sitemap, (s.name for s in sitemap.servers_on(site)))


def voter_tally(sitemap: SiteMap, site: str) -> str:
    voters = sitemap.voters()
    alive = [v for v in voters if v.site != site]
    return f"{len(alive)} of {len(voters)} quorum voters are off site {site}"


def split_site(sitemap: SiteMap, site: str) -> tuple[list[Server], list[Server]]:
    sitemap.site(site)  # raises on an unknown site
    lost = sitemap.servers_on(site)
    survivors = [s for s in sitemap.servers if s.site != site]
    if not any(s.runs("broker") for s in survivors) and not any(
        s.runs("quorum-observer") or s.runs("metadata-standby") for s in survivors
    ):
        raise TopologyError(f"nothing survives the loss of site {site!r}")
    return lost, survivors


def fence_step(sitemap: SiteMap, site: str, lost: Sequence[Server], keeps: bool) -> Step:
    """Make sure the lost site is down, not merely unreachable from here (partition)."""
    c = sitemap.cluster
    kraft = c.quorum == "kraft"
    commands = []
    for s in lost:
        stops = []
        if s.runs("broker") or (kraft and quorum_member(sitemap, s)):
            stops.append("kafka-server-stop.sh")
        if not kraft and quorum_member(sitemap, s):
            stops.append(f"zkServer.sh stop {zk_config(sitemap)}")
        if stops:
            commands.append(
                f"ssh -o ConnectTimeout=10 {q(s.host)} {q('; '.join(stops))}   # if it answers"
            )
    for s in lost:
        ports = [c.broker_port] if s.runs("broker") else []
        if quorum_member(sitemap, s):
            ports.append(c.controller_port if kraft else c.zookeeper_client_port)
        commands += [
            f"nc -z -w 3 {q(s.host)} {port} && echo {q(f'NOT FENCED: {s.name} port {port}')}"
            for port in ports
        ]
    risk = (
        "its brokers would keep leading partitions for the clients that still reach them, "
        "and its quorum members would come back with the old membership"
        if keeps
        else "promoting a minority while the old majority still runs gives two metadata "
        "quorums, each electing its own Kafka controller: split brain"
    )
    return Step(
        f"Fence site {site}: make sure it is down, not just unreachable",
        ", ".join(s.name for s in lost),
        tuple(commands),
        note=f"A network partition looks like a crash from here, but the site keeps running: "
        f"{risk}. Stop its Kafka and ZooKeeper where ssh reaches it; otherwise fence each "
        "server out of band (power it off through its BMC, or cut its links at the switch). "
        "Disable their services' automatic start until failback. Every `nc` line must print "
        f"nothing; go on only once every server of site {site} is fenced.",
    )


def keep_stopped_step(sitemap: SiteMap, site: str, restored: Sequence[Server]) -> Step:
    """First failback step: the returning site's ZooKeeper and Kafka stay down for now."""
    kraft = sitemap.cluster.quorum == "kraft"
    commands = []
    for s in restored:
        if s.runs("broker") or (kraft and quorum_member(sitemap, s)):
            commands.append(
                stopped_then(s, "kafka-server-stop.sh", KAFKA_PROCESS, f"Kafka on {s.name}", "true")
            )
        if not kraft and quorum_member(sitemap, s):
            commands.append(
                stopped_then(
                    s,
                    f"zkServer.sh stop {zk_config(sitemap)}",
                    ZOOKEEPER_PROCESS,
                    f"ZooKeeper on {s.name}",
                    "true",
                )
            )
    services = "Kafka" if kraft else "ZooKeeper and Kafka"
    return Step(
        f"Keep site {site}'s {services} stopped",
        ", ".join(s.name for s in restored),
        tuple(commands),
        note="Servers that come back may start their services on boot. A returning quorum "
        "member would rejoin with stale, possibly divergent data and the old membership; a "
        "returning broker would rejoin before the quorum is ready. Stop them (each command "
        "fails if the process is still there after a minute) and keep their automatic start "
        "disabled: the steps below start each one when its turn comes.",
    )


def confirm_step(sitemap: SiteMap, site: str, admin: Admin) -> Step:
    return Step(
        "Confirm the loss and what it does",
        admin.name,
        (
            f"crossbeat topology check MAP   # scenario: site {site}",
            f"kafka-topics.sh --bootstrap-server {q(admin.bootstrap)} --describe --under-replicated-partitions",
            f"kafka-topics.sh --bootstrap-server {q(admin.bootstrap)} --describe --unavailable-partitions",
        ),
        note="Proceed only for a loss expected to last: every step below is undone by failback.",
    )


def verify_step(admin: Admin) -> Step:
    return Step(
        "Verify",
        admin.name,
        (
            f"kafka-topics.sh --bootstrap-server {q(admin.bootstrap)} --describe --under-min-isr-partitions",
            f"kafka-topics.sh --bootstrap-server {q(admin.bootstrap)} --describe --unavailable-partitions",
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


def metadata_keeps_majority(sitemap: SiteMap, site: str) -> bool | None:
    """Whether most servers running `metadata` are off `site` (None: the map has none)."""
    members = [s for s in sitemap.servers if s.runs("metadata")]
    if not members:
        return None
    return 2 * sum(s.site != site for s in members) > len(members)


def metadata_failover_steps(sitemap: SiteMap, site: str) -> list[Step]:
    """The metadata service's failover step, chosen by counting its members (seed 001)."""
    keeps = metadata_keeps_majority(sitemap, site)
    if keeps is None:
        return []
    if keeps:
        alive = [s for s in sitemap.servers if s.site != site and s.runs("metadata")]
        return [
            metadata_step(
                "Metadata: remove leader enforcement",
                alive,
                "Most metadata members survive: let the metadata leader run without the lost "
                "site's members (seed 001; see the metadata service's documentation). The "
                "embedded SQLite store has nothing to change.",
            )
        ]
    standby = [s for s in sitemap.servers if s.site != site and s.runs("metadata-standby")]
    note = (
        "Most metadata members were on the lost site: run the metadata service's promotion "
        "procedure (seed 001) before anything writes: the gateway and populator need a "
        "metadata leader."
    )
    if not standby:
        note += f" No warm stand-by survives: metadata stays unavailable until site {site} returns."
    return [metadata_step("Metadata: promote the warm stand-by", standby, note)]


def metadata_failback_steps(sitemap: SiteMap, site: str) -> list[Step]:
    """Undo `metadata_failover_steps` once `site` is back."""
    keeps = metadata_keeps_majority(sitemap, site)
    if keeps is None:
        return []
    if keeps:
        alive = [s for s in sitemap.servers if s.site != site and s.runs("metadata")]
        return [
            metadata_step(
                "Metadata: re-enable leader enforcement",
                alive,
                "Undo the failover's change (seed 001; see the metadata service's documentation).",
            )
        ]
    back = [s for s in sitemap.servers_on(site) if s.runs("metadata")]
    return [
        metadata_step(
            f"Metadata: hand leadership back to site {site}",
            back,
            "Run the metadata service's failback procedure; the stand-by returns to warm stand-by.",
        )
    ]


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
