"""Open files: a GET of an object in more parts than the process may open files is served
(the reads pinned ahead of the one being read are bounded), a gateway raises its soft limit
to the hard one, and running out of descriptors is 503 SlowDown, a retry later succeeding,
never a 500 that calls the data corrupt."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossbeat.s3.datapath import PINNED_AHEAD
from tests.support.gateway import running_gateway, s3_client
from tests.support.procs import Service, wait_until

pytestmark = pytest.mark.integration
PARTS = 600  # far more than the hard limit set below leaves free
LIMIT = 256


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data_dir = Path(tmp_path_factory.mktemp("gw")) / "data"
    config = "[gateway]\nworkers = 1\nmin_part_bytes = 0\n"
    with running_gateway(data_dir, config=config) as svc:
        yield svc


@pytest.fixture(scope="module")
def s3(gateway: Service) -> Any:
    return s3_client(gateway.url)


@pytest.fixture(scope="module")
def many_parts(s3: Any, gateway: Service) -> bytes:
    """An object of PARTS parts of 1 KiB, in a gateway limited to LIMIT open files."""
    s3.create_bucket(Bucket="parts")
    upload = s3.create_multipart_upload(Bucket="parts", Key="k")["UploadId"]
    parts = [os.urandom(1024) for _ in range(PARTS)]
    etags = [
        s3.upload_part(Bucket="parts", Key="k", UploadId=upload, PartNumber=n, Body=part)["ETag"]
        for n, part in enumerate(parts, 1)
    ]
    s3.complete_multipart_upload(
        Bucket="parts", Key="k", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]},
    )
    resource.prlimit(gateway.proc.pid, resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
    return b"".join(parts)


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def errors(gateway: Service) -> list[str]:
    return [line for line in gateway.output if "ERROR" in line or "Traceback" in line]


def test_the_gateway_raises_its_soft_limit_to_the_hard_one(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, open_files(os.getpid()) + 128)  # room for this test's own files
    if hard != resource.RLIM_INFINITY and hard <= lowered:
        pytest.skip("the hard limit leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:  # the child inherits the lowered soft limit
        with running_gateway(tmp_path / "data", config="[gateway]\nworkers = 1\n") as svc:
            got_soft, got_hard = resource.prlimit(svc.proc.pid, resource.RLIMIT_NOFILE)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert got_hard == hard
    assert got_soft == (hard if hard != resource.RLIM_INFINITY else max(lowered, 1 << 20))


def test_a_get_of_more_parts_than_open_files_allow(s3: Any, gateway: Service, many_parts: bytes) -> None:
    assert PARTS > LIMIT > PINNED_AHEAD
    assert s3.get_object(Bucket="parts", Key="k")["Body"].read() == many_parts
    ranged = s3.get_object(Bucket="parts", Key="k", Range="bytes=1000-500000")["Body"].read()
    assert ranged == many_parts[1000:500001]
    # a copy reads the parts the same way
    s3.copy_object(Bucket="parts", Key="copy", CopySource={"Bucket": "parts", "Key": "k"})
    assert s3.get_object(Bucket="parts", Key="copy")["Body"].read() == many_parts
    assert errors(gateway) == []


def test_out_of_descriptors_is_slow_down_then_served(s3: Any, gateway: Service, many_parts: bytes) -> None:
    pid = gateway.proc.pid
    # room for a connection and a few reads, not for the reads a GET pins ahead
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_files(pid) + 16, LIMIT))
    try:
        with pytest.raises(s3.exceptions.ClientError) as refused:
            s3.get_object(Bucket="parts", Key="k")
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
    assert refused.value.response["Error"]["Code"] == "SlowDown"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert "file descriptors" in refused.value.response["Error"]["Message"]
    # nothing held on to, nothing changed: the next GET is served whole
    assert s3.get_object(Bucket="parts", Key="k")["Body"].read() == many_parts
    assert errors(gateway) == []
    wait_until(lambda: any("SlowDown on GET /parts/k" in line for line in gateway.output), timeout=10, what="the refusal logged")


def test_idle_downloads_share_the_reads_pinned_ahead(s3: Any, gateway: Service, many_parts: bytes) -> None:
    """Downloads of a multipart object that stop reading hold their reads pinned ahead: 64
    descriptors each, so that 15 of them took 1,011 of 1,024 and every request after them
    was SlowDown. The process pins ahead at most a quarter of its limit over all streams;
    past it pieces are read on their turn. Every stream still gets its bytes."""
    import socket
    from urllib.parse import urlsplit

    big = [os.urandom(128 * 1024) for _ in range(80)]  # 10 MiB: more than socket buffers hold
    upload = s3.create_multipart_upload(Bucket="parts", Key="big")["UploadId"]
    etags = [s3.upload_part(Bucket="parts", Key="big", UploadId=upload, PartNumber=n, Body=part)["ETag"]
             for n, part in enumerate(big, 1)]  # fmt: skip
    s3.complete_multipart_upload(
        Bucket="parts", Key="big", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]},
    )
    url = urlsplit(s3.generate_presigned_url("get_object", Params={"Bucket": "parts", "Key": "big"}))
    request = f"GET {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode()
    idle = []
    try:
        for _ in range(8):  # 8 x 64 = 512 pinned ahead, twice LIMIT
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(30)
            sock.connect((url.hostname, url.port))
            sock.sendall(request)
            assert sock.recv(12) == b"HTTP/1.1 200"  # its stream has begun, and stalls
            idle.append(sock)
        assert open_files(gateway.proc.pid) < LIMIT - 32
        assert s3.get_object(Bucket="parts", Key="k")["Body"].read() == many_parts
        expected = b"".join(big)
        for sock in idle:  # each stalled stream, read now, is whole
            got = b""
            while len(got) < len(expected) + 200:
                piece = sock.recv(1 << 20)
                if not piece:
                    break
                got += piece
                if got.endswith(expected[-4096:]):
                    break
            assert got.split(b"\r\n\r\n", 1)[1] == expected
    finally:
        for sock in idle:
            sock.close()
    assert errors(gateway) == []
