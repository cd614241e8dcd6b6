"""The site map: sites, servers, what each server runs, and the topics to place.

A site map is a TOML file (see `examples/stretched-5-servers.toml`)::

    [cluster]            name, quorum = "zookeeper" | "kraft", min_insync_replicas, ...
    [placement]          start_index, shift (default: derived from each topic name)
    [[sites]]            name, role = "majority" | "minority" | "witness", rack
    [[servers]]          name, site, id, address, services = ["broker", "quorum", ...]
    [[topics]]           name, workflow, partitions (+ optional overrides)

`load_sitemap` returns a validated `SiteMap` or raises `SiteMapError` listing every
problem as `path: message`, e.g. `servers[3].site: unknown site 'site3' (known: site1,
site2)`. Server `id` is the Kafka `broker.id` / KRaft `node.id`; the ZooKeeper `myid` is
`id + 1` because ZooKeeper ids start at 1.

Names end up in file names (`brokers/<server>/...`), properties values and shell commands,
so they are checked against safe character sets: site, server, cluster and rack names are
`NAME_PATTERN`, topic names follow Kafka's rules (`TOPIC_PATTERN`, at most 249 characters,
not "." or ".."), an address is a host name or an IP address, cluster paths are absolute.

Structural rules: exactly one `majority` site; every site has servers, and every site but a
`witness` runs a broker; no site other than the majority site holds a majority of the
quorum voters (its loss would lose the quorum, contradicting its label; the runbooks decide
by counting voters, `quorum_survives`, and this rule keeps the labels honest).
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

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


# Site, server, cluster and rack names: a file-name-safe, shell-safe, properties-safe subset.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
# Kafka's legal topic characters (`Topic.validate`); length and "."/".." are checked apart.
TOPIC_PATTERN = r"^[A-Za-z0-9._-]+$"
TOPIC_MAX_LENGTH = 249
HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*$"
)
# Cluster paths are pasted into shell commands and properties files.
PATH_PATTERN = r"^/[A-Za-z0-9._/@+-]*$"
# The internal topics Kafka creates itself; the planner places them like any other topic.
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


def is_ipv6(host: str) -> bool:
    """True for an IPv6 literal: it must be bracketed before `:port`."""
    return ":" in host


def endpoint(host: str, port: int) -> str:
    """`host:port`, with an IPv6 literal bracketed (`[fd00::1]:9092`)."""
    return f"[{host}]:{port}" if is_ipv6(host) else f"{host}:{port}"


def _check_address(value: str | None) -> str | None:
    if value is None:
        return value
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if not HOSTNAME.match(value):
        raise ValueError(f"{value!r} is neither an IP address nor a host name")
    return value


def _check_name(value: str | None) -> str | None:
    if value is not None and not re.match(NAME_PATTERN, value):
        raise ValueError(
            f"{value!r} is not a safe name: 1 to 63 ASCII letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def _check_path(value: str) -> str:
    if not re.match(PATH_PATTERN, value):
        raise ValueError(f"{value!r} is not an absolute path of ASCII letters, digits and '._/@+-'")
    return value


def _check_topic_name(value: str) -> str:
    if value in (".", ".."):
        raise ValueError(f"topic name {value!r} is not allowed by Kafka")
    if len(value) > TOPIC_MAX_LENGTH:
        raise ValueError(f"topic name is longer than Kafka's {TOPIC_MAX_LENGTH} characters")
    if not re.match(TOPIC_PATTERN, value):
        raise ValueError(
            f"topic name {value!r} may only contain ASCII letters, digits, '.', '_' and '-'"
        )
    return value


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

    _name = field_validator("name")(_check_name)
    _paths = field_validator(
        "kafka_log_dirs", "zookeeper_data_dir", "kafka_config_path", "zookeeper_config_path"
    )(_check_path)


class Placement(_Model):
    """Kafka's assignment start index and follower shift for every topic.

    Unset, each topic gets its own pair derived from its name (`plan.plan_topic`): a fixed
    stand-in for Kafka's random draw, so every command computes the same assignment.
    """

    start_index: int | None = Field(default=None, ge=0)
    shift: int | None = Field(default=None, ge=0)


class Site(_Model):
    name: str
    role: Role
    rack: str | None = Field(default=None, description="broker.rack; the site name if unset")

    _names = field_validator("name", "rack")(_check_name)

    @property
    def rack_label(self) -> str:
        return self.rack or self.name


class Server(_Model):
    name: str
    site: str
    id: int = Field(ge=0, le=254, description="broker.id / node.id; ZooKeeper myid is id + 1")
    address: str | None = Field(
        default=None, description="host name or IP; the server name if unset"
    )
    rack: str | None = Field(default=None, description="overrides the site's rack")
    services: tuple[Service, ...] = ()

    _names = field_validator("name", "rack")(_check_name)
    _address = field_validator("address")(_check_address)

    @property
    def host(self) -> str:
        return self.address or self.name

    def endpoint(self, port: int) -> str:
        """`host:port` for bootstrap lists, listeners and zoo.cfg (IPv6 bracketed)."""
        return endpoint(self.host, port)

    @property
    def myid(self) -> int:
        return self.id + 1

    def runs(self, service: str) -> bool:
        return service in self.services


class TopicSpec(_Model):
    """One topic; unset fields come from the workflow's durability spec (`durability`)."""

    name: str
    workflow: str
    partitions: int = Field(ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    acks: Acks | None = None
    min_insync_replicas: int | None = Field(default=None, ge=1)
    copy_on_each_site: bool | None = None
    rack_aware: bool = True
    start_index: int | None = Field(default=None, ge=0)
    shift: int | None = Field(default=None, ge=0)

    _name = field_validator("name")(_check_topic_name)

    @property
    def internal(self) -> bool:
        """One of Kafka's own topics: Kafka creates it, the plan only places it."""
        return self.name in INTERNAL_TOPICS


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

    def voters(self) -> list[Server]:
        """The metadata quorum's voters (ZooKeeper participants / KRaft controllers)."""
        return [s for s in self.servers if s.runs("quorum")]

    def data_sites(self) -> list[str]:
        """The sites holding a broker, in map order."""
        with_brokers = {s.site for s in self.servers if s.runs("broker")}
        return [s.name for s in self.sites if s.name in with_brokers]

    @property
    def multi_site(self) -> bool:
        """Brokers on more than one site: only then are racks rendered and used (a mono-site
        install shall not enable rack awareness, seed 001)."""
        return len(self.data_sites()) > 1


def quorum_survives(sitemap: SiteMap, lost: Iterable[str]) -> bool:
    """True when more than half of the quorum's voters (by server name) are not in `lost`.

    Observers do not vote. This is the one test the analysis and the runbooks share: a
    runbook for a site loss is chosen by it, not by the site's role label.
    """
    gone = set(lost)
    voters = sitemap.voters()
    alive = [v for v in voters if v.name not in gone]
    return 2 * len(alive) > len(voters)


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
    out += _site_problems(m)
    out += _topic_name_collisions(m)
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


def _site_problems(m: SiteMap) -> list[str]:
    """Empty and brokerless sites, and a non-majority site holding most voters."""
    out: list[str] = []
    voters = [s for s in m.servers if s.runs("quorum")]
    for i, site in enumerate(m.sites):
        servers = [s for s in m.servers if s.site == site.name]
        if not servers:
            out.append(f"sites[{i}] ({site.name}): no server is on this site; remove it")
        elif site.role != "witness" and not any(s.runs("broker") for s in servers):
            out.append(
                f"sites[{i}] ({site.name}): no server on this {site.role} site runs 'broker'; "
                "a site holding only quorum members has role 'witness'"
            )
        held = sum(s.site == site.name for s in voters)
        if site.role != "majority" and voters and 2 * held > len(voters):
            out.append(
                f"sites[{i}] ({site.name}): this {site.role} site holds {held} of the "
                f"{len(voters)} quorum voters, a majority: losing it loses the quorum, so it is "
                "the majority site (swap the roles, or move voters)"
            )
    return out


def _topic_name_collisions(m: SiteMap) -> list[str]:
    # Kafka refuses a topic whose name differs from another's only by '.' versus '_'
    # (they collide in metric names).
    out: list[str] = []
    seen: dict[str, str] = {}
    for t in m.topics:
        key = t.name.replace(".", "_")
        other = seen.setdefault(key, t.name)
        if other != t.name:
            out.append(f"topics: {other!r} and {t.name!r} collide in Kafka's metric names")
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
    except UnicodeDecodeError as exc:
        raise SiteMapError(f"site map {p} is not UTF-8 text: {exc}") from None
    except OSError as exc:
        raise SiteMapError(f"cannot read site map {p}: {exc.strerror or exc}") from None
    return parse_sitemap(document, str(p))
