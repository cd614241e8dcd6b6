"""Memory stays bounded while large bodies stream in and out of the gateway."""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.gateway import running_gateway, s3_client
from tests.support.procs import bytes_read, peak_rss_mib, rss_growth_mib

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MiB = 1024 * 1024
SIZE = 512 * MiB


def body() -> Iterator[bytes]:
    block = hashlib.sha256(b"block").digest() * (MiB // 32)
    for _ in range(SIZE // MiB):
        yield block


def test_half_gib_upload_and_download_use_bounded_memory(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", config="[gateway]\nworkers = 2\n") as gw:
        s3 = s3_client(gw.url, signature_version="s3v4")
        s3.create_bucket(Bucket="stream")
        s3.put_object(Bucket="stream", Key="warmup", Body=b"x")
        s3.get_object(Bucket="stream", Key="warmup")["Body"].read()
        baseline = peak_rss_mib(gw)  # every gateway process: which one serves is not known
        assert len(baseline) >= 2, "expected the gateway's worker processes"
        url = s3.generate_presigned_url("put_object", Params={"Bucket": "stream", "Key": "big"}, ExpiresIn=600)
        r = httpx.put(url, content=body(), headers={"content-length": str(SIZE)}, timeout=600)
        assert r.status_code == 200, r.text
        expected = hashlib.md5()
        for block in body():
            expected.update(block)
        assert r.headers["etag"] == f'"{expected.hexdigest()}"'
        got = hashlib.md5()
        n = 0
        get_url = s3.generate_presigned_url("get_object", Params={"Bucket": "stream", "Key": "big"}, ExpiresIn=600)
        with httpx.stream("GET", get_url, timeout=600) as resp:
            for chunk in resp.iter_bytes():
                got.update(chunk)
                n += len(chunk)
        assert n == SIZE and got.hexdigest() == expected.hexdigest()
        grown = rss_growth_mib(baseline, peak_rss_mib(gw))
        assert grown < 128, f"gateway memory grew by {grown:.0f} MiB while streaming {SIZE // MiB} MiB"


@pytest.mark.parametrize("server", ["lean", "uvicorn"])
def test_a_download_the_client_abandons_stops_reading_the_object(tmp_path: Path, server: str) -> None:
    """A client that reads the first MiB of a 96 MiB object and closes: the gateway stops
    reading the object's chunks soon after, instead of reading (and verifying) the rest for
    nobody, as it did (with uvicorn, whose send returns quietly once the client is gone,
    too)."""
    size = 96 * MiB
    config = f'[gateway]\nworkers = 1\nhttp_server = "{server}"\n'
    with running_gateway(tmp_path / "data", config=config) as gw:
        s3 = s3_client(gw.url, signature_version="s3v4")
        s3.create_bucket(Bucket="stream")
        s3.put_object(Bucket="stream", Key="big", Body=b"z" * size)
        url = httpx.URL(s3.generate_presigned_url("get_object", Params={"Bucket": "stream", "Key": "big"}))
        before = bytes_read(gw)
        with socket.create_connection((gw.host, gw.port), timeout=30) as sock:
            target = url.raw_path.decode()
            sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\n\r\n".encode())
            got = 0
            while got < MiB:
                piece = sock.recv(65536)
                assert piece, "the gateway closed the connection"
                got += len(piece)
        # settled: the reading stopped (or ended) when two readings 0.3 s apart agree
        last, deadline = -1, time.monotonic() + 30
        while (now := bytes_read(gw)) != last and time.monotonic() < deadline:
            last = now
            time.sleep(0.3)
        read = now - before
        assert read < size // 3, f"the gateway read {read / MiB:.0f} MiB for a client that took 1 MiB"
        assert s3.head_object(Bucket="stream", Key="big")["ContentLength"] == size  # still serving
        assert "Traceback" not in "".join(gw.output)
