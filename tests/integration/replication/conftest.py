"""A two-site replication rig: gateways a and b, the broker, the populator and the Spark
pipelines, each a real subprocess on fixed free ports (so a killed one restarts where the
others expect it)."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.gateway import ROOT_AK, ROOT_SK, USERS_TOML, s3_client
from tests.support.procs import Service, start_service, wait_until

ENV = {"CROSSBEAT_ACCESS_KEY": ROOT_AK, "CROSSBEAT_SECRET_KEY": ROOT_SK}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Worker:
    """A non-server crossbeat process that prints `crossbeat <name> ready…` when started."""

    args: list[str]
    proc: subprocess.Popen[str] | None = None
    output: list[str] = field(default_factory=list)

    def start(self, timeout: float = 180) -> Worker:
        env = {**os.environ, **ENV, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "crossbeat", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        proc = self.proc

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.output.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            if line is None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"crossbeat {self.args[0]} did not start:\n{self.log()}")
            if " ready" in line and line.startswith("crossbeat "):
                return self

    def log(self) -> str:
        return "".join(self.output[-200:])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 60) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Rig:
    root: Path
    ports: dict[str, int]
    config: Path
    services: dict[str, Service] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)

    def url(self, site: str) -> str:
        return f"http://127.0.0.1:{self.ports[site]}"

    def s3(self, site: str) -> Any:
        return s3_client(self.url(site))

    def start_gateway(self, site: str) -> Service:
        data = self.root / f"gw-{site}"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.root / f"gw-{site}.toml"
        cfg.write_text(USERS_TOML)
        svc = start_service(
            ["gateway", "--data-dir", str(data), "--listen", f"127.0.0.1:{self.ports[site]}",
             "--config", str(cfg), "--site", site],
            env=ENV,
        )
        self.services[site] = svc
        return svc

    def start_broker(self) -> Service:
        svc = start_service(
            ["broker", "--data-dir", str(self.root / "broker"),
             "--listen", f"127.0.0.1:{self.ports['broker']}"],
            env=ENV,
        )
        self.services["broker"] = svc
        return svc

    def start_populator(self) -> Worker:
        w = Worker(["populate", "--config", str(self.config)]).start()
        self.workers["populator"] = w
        return w

    def start_pipelines(self) -> Worker:
        w = Worker(["pipeline", "replication", "replication-status", "--config",
                    str(self.config), "--master", "local[2]"]).start(timeout=300)
        self.workers["pipeline"] = w
        return w

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "crossbeat", "replication", "--config", str(self.config), *args],
            capture_output=True, text=True, env={**os.environ, **ENV}, timeout=120,
        )

    def logs(self) -> str:
        return "\n".join(f"==== {n}\n{w.log()}" for n, w in self.workers.items())


def write_config(root: Path, ports: dict[str, int]) -> Path:
    cfg = root / "crossbeat.toml"
    brokers = f"127.0.0.1:{ports['broker']}"
    cfg.write_text(f"""
[populator]
gateway = "http://127.0.0.1:{ports['a']}"
brokers = "{brokers}"
data_dir = "{root / 'populator'}"
poll_wait_s = 0.5
topic_partitions = 2

[pipeline]
brokers = "{brokers}"
data_dir = "{root / 'pipeline'}"
topic_partitions = 2
trigger_ms = 200
max_offsets_per_trigger = 500

[extensions.replication]
source = {{ endpoint = "http://127.0.0.1:{ports['a']}" }}
multipart_threshold_bytes = 5242880
part_size_bytes = 5242880
concurrency = 8

unavailable_probe_max_s = 1

[extensions.replication.retry]
max_attempts = 12
max_seconds = 3
backoff_min_s = 0.2
backoff_max_s = 1

[extensions.replication.sites.b]
endpoint = "http://127.0.0.1:{ports['b']}"
""")
    return cfg


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    root = Path(tmp_path_factory.mktemp("replication"))
    ports = {"a": free_port(), "b": free_port(), "broker": free_port()}
    r = Rig(root, ports, write_config(root, ports))
    try:
        r.start_gateway("a")
        r.start_gateway("b")
        r.start_broker()
        r.start_populator()
        r.start_pipelines()
        yield r
    finally:
        for w in r.workers.values():
            w.stop()
        for svc in r.services.values():
            svc.stop()


def replicated_bucket(rig: Rig, name: str, *, at_b: bool = True, delete_markers: bool = True,
                      storage_class: str = "b") -> str:
    a = rig.s3("a")
    a.create_bucket(Bucket=name)
    a.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    a.put_bucket_replication(Bucket=name, ReplicationConfiguration={
        "Role": "arn:aws:iam::000000000000:role/crossbeat",
        "Rules": [{
            "ID": "to-b", "Priority": 1, "Status": "Enabled", "Filter": {"Prefix": ""},
            "DeleteMarkerReplication": {"Status": "Enabled" if delete_markers else "Disabled"},
            "Destination": {"Bucket": f"arn:aws:s3:::{name}", "StorageClass": storage_class},
        }],
    })
    if at_b:
        make_destination_bucket(rig, name)
    return name


def make_destination_bucket(rig: Rig, name: str) -> None:
    b = rig.s3("b")
    b.create_bucket(Bucket=name)
    b.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})


def versions(s3: Any, bucket: str) -> list[tuple[str, str, str, bool, Any]]:
    """(key, versionId, etag-or-DM, isLatest, size) in listing order (version order)."""
    out = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        entries = [(v["Key"], v["VersionId"], v["ETag"], v["IsLatest"], v["Size"], v["LastModified"])
                   for v in page.get("Versions", [])]
        entries += [(d["Key"], d["VersionId"], "DM", d["IsLatest"], None, d["LastModified"])
                    for d in page.get("DeleteMarkers", [])]
        out += entries
    out.sort(key=lambda e: (e[0], e[5], e[1]))
    return [(k, v, e, latest, size) for k, v, e, latest, size, _ in out]


def source_status(rig: Rig, bucket: str, key: str, vid: str) -> str:
    """The version's global replication status at the source (internal metadata route)."""
    from tests.support.gateway import signed

    md = signed("GET", f"{rig.url('a')}/_/crossbeat/metadata/{bucket}/{quote(key)}?versionId={vid}").json()
    return str((md.get("replicationInfo") or {}).get("status", ""))


def source_statuses(rig: Rig, bucket: str) -> dict[str, str]:
    """versionId → global replication status at the source."""
    return {vid: source_status(rig, bucket, key, vid) for key, vid, *_ in versions(rig.s3("a"), bucket)}


def wait_replicated(rig: Rig, bucket: str, timeout: float = 180) -> None:
    """Until every source version is COMPLETED and site b lists exactly the same versions."""

    completed: set[str] = set()  # COMPLETED is final: never ask twice

    def done() -> bool:
        src = versions(rig.s3("a"), bucket)
        if versions(rig.s3("b"), bucket) != src:
            return False
        for key, vid, *_ in src:
            if vid not in completed:
                if source_status(rig, bucket, key, vid) != "COMPLETED":
                    return False
                completed.add(vid)
        return True

    try:
        wait_until(done, timeout=timeout, interval=1.0, what=f"{bucket} replicated")
    except TimeoutError:
        a, b = versions(rig.s3("a"), bucket), versions(rig.s3("b"), bucket)
        missing = [v for v in a if v not in b][:5]
        extra = [v for v in b if v not in a][:5]
        statuses = source_statuses(rig, bucket)
        bad = {v: s for v, s in statuses.items() if s != "COMPLETED"}
        raise AssertionError(
            f"{bucket}: {len(a)} at a, {len(b)} at b; missing {missing}; extra {extra}; "
            f"not completed {list(bad.items())[:5]}\n{rig.logs()}"
        ) from None
