"""`crossbeat up`: everything on one machine — gateways for sites a and b, the broker,
the populator and the replication pipelines on a local Spark (wiring only).

Each component runs as its own `crossbeat …` subprocess (the same commands a real
deployment runs), logging to DATA_DIR/logs/. A component that dies is restarted; Ctrl-C
stops them all, newest first. Everything lives under DATA_DIR, so running `up` again
resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import click
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from crossbeat.cli.datadir_lock import hold_data_dir

READY_MARKERS = ("listening on", " ready")


class Credentials(BaseSettings):
    """The root credentials shared by both sites: CROSSBEAT_ACCESS_KEY / _SECRET_KEY."""

    model_config = SettingsConfigDict(env_prefix="CROSSBEAT_", extra="ignore")

    access_key: str = ""
    secret_key: SecretStr = SecretStr("")


@dataclass
class Child:
    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = 0.0
    log: IO[bytes] | None = field(default=None, repr=False)
    _offset: int = 0  # where this run's output starts in the (appended) log

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = self.log_path.open("ab")
        self._offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "crossbeat", *self.args],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
            start_new_session=True,  # Ctrl-C reaches only us; we stop children in order
        )
        self.started_at = time.monotonic()

    def ready_line(self) -> str | None:
        with self.log_path.open("rb") as fh:
            fh.seek(self._offset)
            for raw in fh:
                line = raw.decode(errors="replace").strip()
                if line.startswith("crossbeat ") and any(m in line for m in READY_MARKERS):
                    return line
        return None

    def wait_ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.ready_line()
            if line:
                return line
            if self.proc is not None and self.proc.poll() is not None:
                raise click.ClickException(
                    f"{self.name} exited; the end of {self.log_path}:\n{self.tail()}"
                )
            time.sleep(0.2)
        raise click.ClickException(f"{self.name} not ready after {timeout:.0f}s; see {self.log_path}")

    def tail(self, lines: int = 15) -> str:
        with self.log_path.open("rb") as fh:
            fh.seek(self._offset)
            return b"".join(fh.readlines()[-lines:]).decode(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        if self.log is not None:
            self.log.close()


def _credentials(data_dir: Path) -> tuple[str, str, bool]:
    """From the environment, else kept from an earlier run, else generated (and kept)."""
    env = Credentials()
    if env.access_key and env.secret_key.get_secret_value():
        return env.access_key, env.secret_key.get_secret_value(), False
    path = data_dir / "credentials.json"
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            return str(doc["access_key"]), str(doc["secret_key"]), False
        except (ValueError, KeyError, TypeError) as exc:
            raise click.ClickException(
                f"{path} is damaged ({exc!r}): restore it, or remove it to generate new credentials"
            ) from exc
    ak = "CB" + secrets.token_hex(9).upper()
    sk = secrets.token_urlsafe(30)
    data_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"access_key": ak, "secret_key": sk}))
    path.chmod(0o600)
    return ak, sk, True


def _config(data_dir: Path, port_base: int) -> Path:
    a, b, broker = port_base, port_base + 1, port_base + 2
    data_dir.mkdir(parents=True, exist_ok=True)
    cfg = data_dir / "crossbeat.toml"
    cfg.write_text(f"""# written by `crossbeat up`; regenerated on every run
# One machine: two partitions per topic keep every Spark batch to one wave of tasks.
[populator]
gateway = "http://127.0.0.1:{a}"
brokers = "127.0.0.1:{broker}"
data_dir = "{data_dir / 'populator'}"
topic_partitions = 2

[pipeline]
brokers = "127.0.0.1:{broker}"
data_dir = "{data_dir / 'pipeline'}"
topic_partitions = 2

[extensions.replication]
source = {{ endpoint = "http://127.0.0.1:{a}" }}

[extensions.replication.sites.b]
endpoint = "http://127.0.0.1:{b}"
""")
    return cfg


def _banner(port_base: int, ak: str, sk: str, generated: bool, data_dir: Path) -> str:
    a, b, broker = port_base, port_base + 1, port_base + 2
    rule = json.dumps({
        "Role": "arn:aws:iam::000000000000:role/crossbeat",
        "Rules": [{"ID": "to-b", "Priority": 1, "Status": "Enabled", "Filter": {"Prefix": ""},
                   "DeleteMarkerReplication": {"Status": "Enabled"},
                   "Destination": {"Bucket": "arn:aws:s3:::demo", "StorageClass": "b"}}],
    })
    return f"""
crossbeat is up (data in {data_dir})
  site a  S3 gateway   http://127.0.0.1:{a}
  site b  S3 gateway   http://127.0.0.1:{b}
  broker  Kafka        127.0.0.1:{broker}
  populator + Spark replication pipelines (local[*]); logs in {data_dir / 'logs'}
credentials{' (generated, kept in ' + str(data_dir / 'credentials.json') + ')' if generated else ''}:
  export AWS_ACCESS_KEY_ID={ak}
  export AWS_SECRET_ACCESS_KEY={sk}
try it:
  for p in {a} {b}; do aws --endpoint-url http://127.0.0.1:$p s3 mb s3://demo
    aws --endpoint-url http://127.0.0.1:$p s3api put-bucket-versioning --bucket demo --versioning-configuration Status=Enabled; done
  aws --endpoint-url http://127.0.0.1:{a} s3api put-bucket-replication --bucket demo --replication-configuration '{rule}'
  echo hello > hello.txt && aws --endpoint-url http://127.0.0.1:{a} s3 cp hello.txt s3://demo/
  aws --endpoint-url http://127.0.0.1:{b} s3api head-object --bucket demo --key hello.txt   # ReplicationStatus: REPLICA
Ctrl-C stops everything; run `crossbeat up` again to resume.
"""


@click.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("./crossbeat-data"), show_default=True)
@click.option("--port-base", type=click.IntRange(1, 65533), default=8000, show_default=True,
              help="site a on N, site b on N+1, the broker on N+2")
@click.option("--master", default="local[*]", show_default=True, help="Spark master")
def up(data_dir: Path, port_base: int, master: str) -> None:
    """Start two sites, the broker, the populator and the replication pipelines."""
    data_dir = data_dir.resolve()
    _lock = hold_data_dir(data_dir, "up")  # before crossbeat.toml is rewritten
    ak, sk, generated = _credentials(data_dir)
    cfg = _config(data_dir, port_base)
    env = {**os.environ, "CROSSBEAT_ACCESS_KEY": ak, "CROSSBEAT_SECRET_KEY": sk,
           "PYTHONUNBUFFERED": "1"}
    # Each gateway runs its default number of processes (one per core, at most 4; or
    # CROSSBEAT_WORKERS). With the replication pipeline's batches no longer waiting on
    # Python workers' garbage collection, one process per gateway became the limit: its
    # threads queue for one GIL at every syscall of a batch of replicas.
    # (benchmarks/replication.py --rpo-only, 200 PUT/s on 2 cores, interleaved runs: RPO
    # p99 1.43-2.35 s, median ~1.85, with two processes; 1.41-4.40 s, median ~2.15, with one.)
    logs = data_dir / "logs"

    def child(name: str, *args: str) -> Child:
        return Child(name, list(args), logs / f"{name}.log", env)

    servers = [
        child("gateway-a", "gateway", "--data-dir", str(data_dir / "site-a"), "--site", "a",
              "--listen", f"127.0.0.1:{port_base}"),
        child("gateway-b", "gateway", "--data-dir", str(data_dir / "site-b"), "--site", "b",
              "--listen", f"127.0.0.1:{port_base + 1}"),
        child("broker", "broker", "--data-dir", str(data_dir / "broker"),
              "--listen", f"127.0.0.1:{port_base + 2}"),
    ]
    workers = [
        child("populator", "populate", "--config", str(cfg)),
        child("pipelines", "pipeline", "replication", "replication-status", "--config", str(cfg),
              "--master", master),
    ]
    children = servers + workers
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        for c in servers:
            c.start()
        for c in servers:
            click.echo(c.wait_ready(60))
        for c in workers:
            c.start()
        for c in workers:
            click.echo(c.wait_ready(300))
        click.echo(_banner(port_base, ak, sk, generated, data_dir))
        click.echo("crossbeat up ready")
        sys.stdout.flush()
        while not stop.wait(1.0):
            for c in children:
                if not c.alive() and time.monotonic() - c.started_at > 5:
                    c.restarts += 1
                    click.echo(f"{c.name} exited ({c.proc.returncode if c.proc else '?'}); "
                               f"restarting (see {c.log_path})", err=True)
                    c.start()
    finally:
        click.echo("stopping…")
        for c in reversed(children):
            c.stop()
        click.echo("stopped")
