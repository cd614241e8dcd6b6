"""`crossbeat up`: everything on one machine — gateways for sites a and b, the broker,
the populator and the replication pipelines on a local Spark (wiring only).

Each component runs as its own `crossbeat …` subprocess (the same commands a real
deployment runs), logging to DATA_DIR/logs/. A component that dies is restarted; Ctrl-C
stops them all, newest first. Everything lives under DATA_DIR, so running `up` again
resumes where it stopped.

Nothing outlives `up`, however it ends (Linux): each child leads a session of its own
and gets SIGKILL when `up` dies (PR_SET_PDEATHSIG, as gateway workers do), and a small
forked sweeper kills whatever is left in those sessions once `up` is gone (the JVM and
Spark's Python workers are the children's children, which PDEATHSIG does not reach).
A stopped or restarted child's leftovers are killed by `up` itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import click
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from crossbeat.cli.datadir_lock import hold_data_dir
from crossbeat.s3.server import die_with_parent  # as gateway workers die with their supervisor

READY_MARKERS = ("listening on", " ready")


class Credentials(BaseSettings):
    """The root credentials shared by both sites: CROSSBEAT_ACCESS_KEY / _SECRET_KEY."""

    model_config = SettingsConfigDict(env_prefix="CROSSBEAT_", extra="ignore")

    access_key: str = ""
    secret_key: SecretStr = SecretStr("")


def _tied_to(parent: int) -> Callable[[], None]:
    """A `preexec_fn`: the child gets SIGKILL when `parent` (this process) dies, however it
    dies. PDEATHSIG fires when the *thread* that forked the child ends, so children are
    started from the main thread (as `up` does), never from a short-lived one."""

    def preexec() -> None:
        die_with_parent()
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os._exit(1)

    return preexec


def session_members(sessions: Iterable[int]) -> list[int]:
    """The live (not zombie) processes in any of `sessions`; [] where there is no /proc."""
    wanted = set(sessions)
    found: list[int] = []
    try:
        names = os.listdir("/proc") if wanted else []
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # ended meanwhile
            continue
        # after the command name (which may hold spaces and parentheses): state ppid pgrp session
        fields = stat[stat.rindex(b")") + 2:].split()
        if fields[0] != b"Z" and int(fields[3]) in wanted:
            found.append(int(name))
    return found


def end_sessions(sessions: Iterable[int], grace: float = 0.0, timeout: float = 10.0) -> list[int]:
    """Kill every process in `sessions`: SIGTERM and up to `grace` seconds to exit (none if
    0), then SIGKILL, again for any that appear meanwhile, for up to `timeout` seconds.
    Returns the processes still there (none, unless they may not be signalled).

    A session, not a process group: pyspark's daemons move to process groups of their own
    but stay in the session of the driver that started them."""
    sids = set(sessions)

    def signal_all(sig: signal.Signals) -> list[int]:
        pids = session_members(sids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return pids

    if grace > 0 and signal_all(signal.SIGTERM):
        deadline = time.monotonic() + grace
        while session_members(sids) and time.monotonic() < deadline:
            time.sleep(0.05)
    deadline = time.monotonic() + timeout
    while signal_all(signal.SIGKILL) and time.monotonic() < deadline:
        time.sleep(0.05)
    return session_members(sids)


class Sweeper:
    """A forked process that kills what is left in the children's sessions once `up` is gone.

    It reads a pipe whose only writer is `up`: end of file means `up` ended, however it
    ended (kill -9 included), and it then SIGKILLs every process still in the sessions it
    was told of, and exits. `up` tells it each session it starts (`watch`) and each it has
    emptied itself (`forget`), so that a session id the kernel hands out again later is
    never a target. It runs in a session of its own: Ctrl-C in `up`'s terminal, or a kill
    of `up`'s process group, does not end it before it has swept.
    """

    def __init__(self) -> None:
        read_end, self._write_end = os.pipe()  # close-on-exec: no child holds it open
        self.pid = os.fork()
        if self.pid == 0:
            code = 0
            try:
                os.close(self._write_end)
                _sweep_at_eof(read_end)
            except BaseException:  # noqa: BLE001 - never unwind into `up`'s code in this fork
                code = 1
            os._exit(code)
        os.close(read_end)
        self._closed = False

    def watch(self, session: int) -> None:
        self._send(f"+{session}\n")

    def forget(self, session: int) -> None:
        self._send(f"-{session}\n")

    def _send(self, line: str) -> None:
        if self._closed:
            return
        # OSError: the sweeper was killed; PDEATHSIG still ends the children themselves
        with contextlib.suppress(OSError):
            os.write(self._write_end, line.encode())  # one short write: atomic on a pipe

    def close(self, timeout: float = 15.0) -> None:
        """Let the sweeper go (it sweeps what it still watches) and reap it."""
        if self._closed:
            return
        self._closed = True
        os.close(self._write_end)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0] != 0:
                    return
            except ChildProcessError:  # reaped already
                return
            time.sleep(0.05)


def _sweep_at_eof(read_end: int) -> None:
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # hold no pipe of `up`'s caller open (`up | tee` ends with `up`)
        os.dup2(devnull, fd)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    sessions: set[int] = set()
    pending = b""
    while chunk := os.read(read_end, 4096):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            (sessions.add if line.startswith(b"+") else sessions.discard)(int(line[1:]))
    end_sessions(sessions)


class StartInterrupted(Exception):
    """Ctrl-C (SIGINT or SIGTERM) came while `crossbeat up` was starting its children; the
    message names the child it was waiting for."""


@dataclass
class Child:
    """One component: `python -m crossbeat ARGS` (or `command` ARGS) logging to `log_path`,
    in a session of its own that does not outlive it (see `start`, `stop`, `Sweeper`)."""

    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str]
    sweeper: Sweeper | None = None
    command: list[str] = field(default_factory=lambda: [sys.executable, "-m", "crossbeat"])
    grace: float = 10.0  # seconds what a run left in its session gets from SIGTERM to SIGKILL
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = 0.0
    log: IO[bytes] | None = field(default=None, repr=False)
    _offset: int = 0  # where this run's output starts in the (appended) log

    def start(self) -> None:
        """Start the component, or restart it once what its last run left is killed (a
        driver that crashed leaves its JVM). Call from the main thread (`_tied_to`)."""
        self._end_session()
        if self.log is not None:
            self.log.close()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = self.log_path.open("ab")
        self._offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            [*self.command, *self.args],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
            # Ctrl-C reaches only us (we stop children in order), and the session holds
            # everything the child starts, for `_end_session` and the sweeper
            start_new_session=True,
            preexec_fn=_tied_to(os.getpid()),
        )
        if self.sweeper is not None:
            self.sweeper.watch(self.proc.pid)
        self.started_at = time.monotonic()

    def ready_line(self) -> str | None:
        with self.log_path.open("rb") as fh:
            fh.seek(self._offset)
            for raw in fh:
                line = raw.decode(errors="replace").strip()
                if line.startswith("crossbeat ") and any(m in line for m in READY_MARKERS):
                    return line
        return None

    def wait_ready(self, timeout: float, stop: threading.Event | None = None) -> str:
        """The child's ready line, once it has printed it; StartInterrupted as soon as
        `stop` is set (Ctrl-C while starting), ClickException if it exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                raise StartInterrupted(self.name)
            line = self.ready_line()
            if line:
                return line
            if self.proc is not None and self.proc.poll() is not None:
                raise click.ClickException(
                    f"{self.name} exited; the end of {self.log_path}:\n{self.tail()}"
                )
            if stop is not None:
                stop.wait(0.2)
            else:
                time.sleep(0.2)
        raise click.ClickException(f"{self.name} not ready after {timeout:.0f}s; see {self.log_path}")

    def tail(self, lines: int = 15) -> str:
        with self.log_path.open("rb") as fh:
            fh.seek(self._offset)
            return b"".join(fh.readlines()[-lines:]).decode(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (SIGKILL after `timeout`); then what the child left in its session gets
        SIGTERM and `grace` seconds, then SIGKILL."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._end_session()
        if self.log is not None:
            self.log.close()

    def _end_session(self) -> None:
        """Kill what the last run left in its session (once its leader has ended)."""
        if self.proc is None or self.proc.poll() is None:
            return
        left = end_sessions([self.proc.pid], self.grace)
        if left:  # unkillable for now: the sweeper keeps watching them
            click.echo(f"{self.name}: processes {left} did not end", err=True)
        elif self.sweeper is not None:
            self.sweeper.forget(self.proc.pid)


LEFTOVER_WAIT_S = 5.0


def _locked(path: Path) -> bool:
    """Whether some process holds the lock `datadir_lock` takes on `path` (we take it
    shared for a moment, which only a holder's exclusive lock refuses)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _leftovers(locks: list[Path], data_dir: Path, ignore: set[int]) -> dict[int, str]:
    """pid → command line of each process (but us and `ignore`) that holds one of `locks`
    open or runs a crossbeat command naming `data_dir` (the populator and the pipelines
    hold no lock); {} where there is no /proc."""
    targets = {str(p) for p in locks}
    names_dir = re.compile(re.escape(str(data_dir)) + r"(/|\s|$)")
    found: dict[int, str] = {}
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid == os.getpid() or pid in ignore:
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile
            continue
        cmd = " ".join(a.decode(errors="replace") for a in argv if a)
        holds = False
        with contextlib.suppress(OSError):  # ended meanwhile, or another user's
            holds = any(os.readlink(f"/proc/{pid}/fd/{fd}") in targets
                        for fd in os.listdir(f"/proc/{pid}/fd"))
        if holds or ("crossbeat" in cmd and names_dir.search(cmd)):
            found[pid] = cmd
    return found


def _refuse_leftovers(data_dir: Path, locks: list[Path], ignore: set[int]) -> None:
    """Wait (up to LEFTOVER_WAIT_S) for `locks` (the servers' data dirs) to be free — the
    children of an `up` killed a moment ago are being swept — then refuse to start while
    any is held, naming the processes to stop: left by an `up` killed before children
    died with it, or started by hand. Otherwise a gateway would report only "in use by
    another gateway (pid N)", one process of many."""
    deadline = time.monotonic() + LEFTOVER_WAIT_S
    held = [p for p in locks if _locked(p)]
    while held and time.monotonic() < deadline:
        time.sleep(0.1)
        held = [p for p in held if _locked(p)]
    if not held:
        return
    procs = _leftovers(held, data_dir, ignore)
    if procs:
        listing = "\n".join(f"  pid {pid}: {cmd[:200]}" for pid, cmd in sorted(procs.items()))
        how = f"stop them (kill {' '.join(str(p) for p in sorted(procs))})"
    else:  # no /proc, or not ours to read: each lock file names the pid that took it
        listing = "\n".join(f"  {p}: taken by pid {p.read_text().strip() or '?'}" for p in held)
        how = f"find them with `fuser -v {' '.join(str(p) for p in held)}`, stop them"
    raise click.ClickException(
        f"data dir {data_dir} is still in use by processes of an earlier run (a `crossbeat up`"
        f" that was killed, or servers started by hand) holding"
        f" {', '.join(str(p.relative_to(data_dir)) for p in held)}:\n{listing}\n"
        f"{how} and run `crossbeat up` again"
    )


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

# read by site a's gateway only: the sites its buckets' replication rules may name
[gateway]
replication_sites = ["b"]

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
  export CROSSBEAT_ACCESS_KEY={ak}   # the same root pair, for `crossbeat replication …`
  export CROSSBEAT_SECRET_KEY={sk}
try it:
  for p in {a} {b}; do aws --endpoint-url http://127.0.0.1:$p s3 mb s3://demo
    aws --endpoint-url http://127.0.0.1:$p s3api put-bucket-versioning --bucket demo --versioning-configuration Status=Enabled; done
  aws --endpoint-url http://127.0.0.1:{a} s3api put-bucket-replication --bucket demo --replication-configuration '{rule}'
  echo hello > hello.txt && aws --endpoint-url http://127.0.0.1:{a} s3 cp hello.txt s3://demo/
  aws --endpoint-url http://127.0.0.1:{b} s3api head-object --bucket demo --key hello.txt   # ReplicationStatus: REPLICA
  crossbeat replication --config {data_dir / 'crossbeat.toml'} failed   # needs CROSSBEAT_* above
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
    # forked first, so that it holds none of our files (the lock); it ends when we do
    sweeper = Sweeper()
    _lock = hold_data_dir(data_dir, "up")  # before crossbeat.toml is rewritten
    _refuse_leftovers(data_dir, [data_dir / "site-a" / ".gateway.lock",
                                 data_dir / "site-b" / ".gateway.lock",
                                 data_dir / "broker" / ".broker.lock"], {sweeper.pid})
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
        return Child(name, list(args), logs / f"{name}.log", env, sweeper)

    servers = [
        child("gateway-a", "gateway", "--data-dir", str(data_dir / "site-a"), "--site", "a",
              "--listen", f"127.0.0.1:{port_base}", "--config", str(cfg)),
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
        try:
            # Ctrl-C while starting stops what has started, at once (the pipelines alone
            # may take a minute to be ready)
            for group, limit in ((servers, 60), (workers, 300)):
                for c in group:
                    if stop.is_set():
                        raise StartInterrupted(c.name)
                    c.start()
                for c in group:
                    click.echo(c.wait_ready(limit, stop))
        except StartInterrupted as interrupted:
            click.echo(f"interrupted while starting ({interrupted} was not ready)")
            return
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
        sweeper.close()
        click.echo("stopped")
