"""The site map: sites, servers, what each server runs, and the topics to place.

A site map is a TOML file (see `examples/stretched-5-servers.toml`)::

    [cluster]            name, quorum = "zookeeper" | "kraft", min_insync_replicas, ...
    [placement]          start_index, shift (fixed for reproducible assignments)
    [[sites]]            name, role = "majority" | "minority" | "witness", rack
    [[servers]]          name, site, id, address, services = ["broker", "quorum", ...]
    [[topics]]           name, workflow, partitions (+ optional overrides)

`load_sitemap` returns a validated `SiteMap` or raises `SiteMapError` listing every
problem as `path: message`, e.g. `servers[3].site: unknown site 'site3' (known: site1,
site2)`. Server `id` is the Kafka `broker.id` / KRaft `node.id`; the ZooKeeper `myid` is
`id + 1` because ZooKeeper ids start at 1.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from crossbeat.topology.durability import resolve
from crossbeat.topology.errors import SiteMapError, TopologyError

Role = Literal["majority", "minority", "witness"]
Acks = Literal["0", "1", "all"]
# Kafka and quorum roles the planner reasons about, plus the crossbeat services a server may
# run (listed so that a typo is an error rather than a silently ignored service).
Service = Literal[
    "broker",
    "quorum",
    "quorum-observer",
    "gateway",
    "metadata",
    "metadata-standby",
    "populator",
    "pipelines",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Cluster(_Model):
    """Cluster-wide settings rendered into every broker's server.properties."""

    name: str = "crossbeat"
    quorum: Literal["zookeeper", "kraft"] = "zookeeper"
    min_insync_replicas: int = Field(default=2, ge=1)
    follower_fetching: bool = True
    broker_port: int = Field(default=9092, ge=1, le=65535)
    controller_port: int = Field(default=9093, ge=1, le=65535)
    zookeeper_client_port: int = Field(default=2181, ge=1, le=65535)
    zookeeper_peer_port: int = Field(default=2888, ge=1, le=65535)
    zookeeper_election_port: int = Field(default=3888, ge=1, le=65535)
    kafka_log_dirs: str = "/var/lib/kafka/data"
    zookeeper_data_dir: str = "/var/lib/zookeeper"
    kafka_config_path: str = "/etc/kafka/server.properties"
    zookeeper_config_path: str = "/etc/zookeeper/zoo.cfg"


class Placement(_Model):
    """Kafka's assignment start index and follower shift; None draws them at random."""

    start_index: int | None = Field(default=None, ge=0)
    shift: int | None = Field(default=None, ge=0)


class Site(_Model):
    name: str = Field(min_length=1)
    role: Role
    rack: str | None = Field(
        default=None, min_length=1, description="broker.rack; the site name if unset"
    )

    @property
    def rack_label(self) -> str:
        return self.rack or self.name


class Server(_Model):
    name: str = Field(min_length=1)
    site: str
    id: int = Field(ge=0, le=254, description="broker.id / node.id; ZooKeeper myid is id + 1")
    address: str | None = Field(
        default=None, description="host name or IP; the server name if unset"
    )
    rack: str | None = Field(default=None, min_length=1, description="overrides the site's rack")
    services: tuple[Service, ...] = ()

    @property
    def host(self) -> str:
        return self.address or self.name

    @property
    def myid(self) -> int:
        return self.id + 1

    def runs(self, service: str) -> bool:
        return service in self.services


class TopicSpec(_Model):
    """One topic; unset fields come from the workflow's durability spec (`durability`)."""

    name: str = Field(min_length=1)
    workflow: str
    partitions: int = Field(ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    acks: Acks | None = None
    min_insync_replicas: int | None = Field(default=None, ge=1)
    copy_on_each_site: bool | None = None
    rack_aware: bool = True
    start_index: int | None = Field(default=None, ge=0)
    shift: int | None = Field(default=None, ge=0)


class SiteMap(_Model):
    cluster: Cluster = Field(default_factory=Cluster)
    placement: Placement = Field(default_factory=Placement)
    sites: tuple[Site, ...]
    servers: tuple[Server, ...]
    topics: tuple[TopicSpec, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> SiteMap:
        problems = _problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def site(self, name: str) -> Site:
        for site in self.sites:
            if site.name == name:
                return site
        raise SiteMapError(
            f"unknown site {name!r} (known: {', '.join(s.name for s in self.sites)})"
        )

    def server(self, name: str) -> Server:
        for server in self.servers:
            if server.name == name:
                return server
        raise SiteMapError(f"unknown server {name!r}")

    def servers_on(self, site: str) -> list[Server]:
        return [s for s in self.servers if s.site == site]

    def brokers(self) -> list[Server]:
        return sorted((s for s in self.servers if s.runs("broker")), key=lambda s: s.id)

    def rack_of(self, server: Server) -> str:
        return server.rack or self.site(server.site).rack_label

    def majority_site(self) -> Site:
        return next(s for s in self.sites if s.role == "majority")


def _duplicates(values: Sequence[object]) -> list[str]:
    seen: set[object] = set()
    dups: list[str] = []
    for v in values:
        if v in seen and str(v) not in dups:
            dups.append(str(v))
        seen.add(v)
    return dups


def _problems(m: SiteMap) -> list[str]:
    """Cross-field checks pydantic's per-field validation cannot express."""
    out: list[str] = []
    for what, values in (
        ("site names", [s.name for s in m.sites]),
        ("server names", [s.name for s in m.servers]),
        ("server ids", [s.id for s in m.servers]),
        ("topic names", [t.name for t in m.topics]),
    ):
        for dup in _duplicates(values):
            out.append(f"duplicate {what}: {dup}")
    majority = [s.name for s in m.sites if s.role == "majority"]
    if len(majority) != 1:
        out.append(f"sites: exactly one site must have role 'majority' (found {len(majority)})")
    site_names = {s.name: s for s in m.sites}
    for i, server in enumerate(m.servers):
        site = site_names.get(server.site)
        if site is None:
            out.append(
                f"servers[{i}].site: unknown site {server.site!r} (known: {', '.join(site_names)})"
            )
        elif site.role == "witness" and server.runs("broker"):
            out.append(f"servers[{i}]: witness site {site.name!r} may not run a broker")
        if server.runs("quorum") and server.runs("quorum-observer"):
            out.append(f"servers[{i}]: a server is either a quorum voter or an observer, not both")
    brokers = [s for s in m.servers if s.runs("broker")]
    if not brokers:
        out.append("servers: no server runs 'broker'")
    if not any(s.runs("quorum") for s in m.servers):
        out.append("servers: no server runs 'quorum' (the metadata quorum needs voters)")
    if m.cluster.min_insync_replicas > max(len(brokers), 1):
        out.append(
            f"cluster.min_insync_replicas: {m.cluster.min_insync_replicas} exceeds the "
            f"{len(brokers)} brokers"
        )
    for i, topic in enumerate(m.topics):
        try:
            d = resolve(
                topic.workflow,
                cluster_min_insync_replicas=m.cluster.min_insync_replicas,
                acks=topic.acks,
                replication_factor=topic.replication_factor,
                min_insync_replicas=topic.min_insync_replicas,
                copy_on_each_site=topic.copy_on_each_site,
            )
        except TopologyError as exc:
            out.append(f"topics[{i}] ({topic.name}): {exc}")
            continue
        if d.replication_factor > len(brokers):
            out.append(
                f"topics[{i}] ({topic.name}): replication factor {d.replication_factor} "
                f"exceeds the {len(brokers)} brokers"
            )
    return out


def _format_validation(exc: ValidationError) -> list[str]:
    lines: list[str] = []
    for err in exc.errors():
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
        msg = err["msg"].removeprefix("Value error, ")
        lines.extend(f"{loc}: {part}" if loc else part for part in msg.splitlines())
    return lines


def parse_sitemap(document: dict[str, Any], source: str = "site map") -> SiteMap:
    """Validate an already-parsed TOML document; SiteMapError lists every problem."""
    try:
        return SiteMap.model_validate(document)
    except ValidationError as exc:
        problems = "\n".join(f"  - {line}" for line in _format_validation(exc))
        raise SiteMapError(f"{source} is invalid:\n{problems}") from None


def load_sitemap(path: str | Path) -> SiteMap:
    """Read and validate the TOML site map at `path`."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            document = tomllib.load(fh)
    except FileNotFoundError:
        raise SiteMapError(f"site map not found: {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SiteMapError(f"site map {p} is not valid TOML: {exc}") from None
    return parse_sitemap(document, str(p))
