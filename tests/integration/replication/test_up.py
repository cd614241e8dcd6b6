"""`crossbeat up`: two sites replicating out of the box; Ctrl-C stops all; re-run resumes."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.gateway import ROOT_AK, ROOT_SK, s3_client
from tests.support.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow,
              pytest.mark.timeout(600)]


def free_port_base() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base > 65000:
            continue
        try:
            socks = []
            for p in range(base, base + 3):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no three consecutive free ports")


def run_up(data_dir: Path, base: int) -> tuple[subprocess.Popen[str], list[str]]:
    env = {**os.environ, "CROSSBEAT_ACCESS_KEY": ROOT_AK, "CROSSBEAT_SECRET_KEY": ROOT_SK}
    proc = subprocess.Popen(
        [sys.executable, "-m", "crossbeat", "up", "--data-dir", str(data_dir),
         "--port-base", str(base), "--master", "local[2]"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    out: list[str] = []
    ready: queue.Queue[bool] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if line.strip() == "crossbeat up ready":
                ready.put(True)
        ready.put(False)

    threading.Thread(target=pump, daemon=True).start()
    if not ready.get(timeout=300):
        raise AssertionError("".join(out))
    return proc, out


def interrupt(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(timeout=120)


def test_up_replicates_stops_cleanly_and_resumes(tmp_path: Path) -> None:
    base = free_port_base()
    proc, out = run_up(tmp_path / "data", base)
    try:
        text = "".join(out)
        assert f"http://127.0.0.1:{base}" in text and f"http://127.0.0.1:{base + 1}" in text
        assert f"127.0.0.1:{base + 2}" in text and "aws --endpoint-url" in text
        assert ROOT_AK in text
        a, b = s3_client(f"http://127.0.0.1:{base}"), s3_client(f"http://127.0.0.1:{base + 1}")
        for s3 in (a, b):
            s3.create_bucket(Bucket="demo")
            s3.put_bucket_versioning(Bucket="demo", VersioningConfiguration={"Status": "Enabled"})
        a.put_bucket_replication(Bucket="demo", ReplicationConfiguration={
            "Role": "arn:aws:iam::000000000000:role/crossbeat",
            "Rules": [{"ID": "to-b", "Priority": 1, "Status": "Enabled", "Filter": {"Prefix": ""},
                       "DeleteMarkerReplication": {"Status": "Enabled"},
                       "Destination": {"Bucket": "arn:aws:s3:::demo", "StorageClass": "b"}}]})
        a.put_object(Bucket="demo", Key="hello.txt", Body=b"hello")
        wait_until(lambda: b.head_object(Bucket="demo", Key="hello.txt")["ReplicationStatus"]
                   == "REPLICA", timeout=120, interval=0.5, what="replica at b")
    finally:
        code = interrupt(proc)
    assert code == 0, "".join(out)
    assert "stopped" in "".join(out)
    # Nothing left listening: every child stopped with it.
    for port in (base, base + 1, base + 2):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, port
    # Writes while it is down replicate once it is back.
    proc, out = run_up(tmp_path / "data", base)
    try:
        a, b = s3_client(f"http://127.0.0.1:{base}"), s3_client(f"http://127.0.0.1:{base + 1}")
        a.put_object(Bucket="demo", Key="again.txt", Body=b"again")
        wait_until(lambda: b.get_object(Bucket="demo", Key="again.txt")["Body"].read() == b"again",
                   timeout=120, interval=0.5, what="replica after restart")
        assert b.get_object(Bucket="demo", Key="hello.txt")["Body"].read() == b"hello"
    finally:
        assert interrupt(proc) == 0, "".join(out)


def test_ctrl_c_while_starting_stops_at_once(tmp_path: Path) -> None:
    """Ctrl-C while `up` waits for its children stops what has started, without starting
    the rest (the pipelines alone take many seconds to be ready): it went on starting
    everything, printed the banner and "ready", and only then stopped."""
    base = free_port_base()
    env = {**os.environ, "CROSSBEAT_ACCESS_KEY": ROOT_AK, "CROSSBEAT_SECRET_KEY": ROOT_SK}
    proc = subprocess.Popen(
        [sys.executable, "-m", "crossbeat", "up", "--data-dir", str(tmp_path / "up"),
         "--port-base", str(base), "--master", "local[2]"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    out: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:  # until the broker (the last server) is ready
        out.append(line)
        if "kafka://" in line:
            break
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    out += proc.stdout.readlines()
    text = "".join(out)
    assert "interrupted while starting" in text, text
    assert "crossbeat up ready" not in text
    assert "stopped" in text
    # nothing it started is left: the data dir's locks are free for the next run
    proc2, _ = run_up(tmp_path / "up", base)
    assert interrupt(proc2) == 0
