"""Fixtures for the repository tests: sfs repositories in temporary directories and a real
moto S3 server (a third-party peer) in a subprocess on a free loopback port."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossbeat.repositories.settings import RepositorySettings
from crossbeat.repositories.sfs import SfsRepository
from tests.support.procs import wait_until

SMALL_CHUNK = 1024


@pytest.fixture
def sfs(tmp_path: Path) -> SfsRepository:
    """An sfs repository with 1 KiB chunks, so multi-chunk objects stay small."""
    return SfsRepository("local", tmp_path / "sfs", chunk_size=SMALL_CHUNK)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto S3 server running as a subprocess for the whole session."""
    moto = Path(sys.executable).with_name("moto_server")
    for _ in range(3):  # the free port may be taken between probe and bind: retry
        port = _free_port()
        proc = subprocess.Popen(
            [str(moto), "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(
                lambda p=port, q=proc: _accepts(p) or q.poll() is not None,
                timeout=30,
                what="moto_server",
            )
        except TimeoutError:
            proc.kill()
            raise
        if proc.poll() is None:
            break
    else:
        raise RuntimeError("moto_server did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def moto_client(moto_endpoint: str) -> Iterator[Any]:
    """A plain boto3 client on the moto server (creating clients is slow: share one)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    yield client
    client.close()


@pytest.fixture
def s3_settings(moto_endpoint: str, moto_client: Any) -> RepositorySettings:
    """Settings of an s3 repository over a fresh bucket on the moto server."""
    bucket = f"repo-{uuid.uuid4().hex[:12]}"
    moto_client.create_bucket(Bucket=bucket)
    return RepositorySettings(
        type="s3",
        endpoint_url=moto_endpoint,
        bucket=bucket,
        access_key="testing",
        secret_key="testing",  # type: ignore[arg-type]  # pydantic coerces to SecretStr
        prefix="data/",
        part_size=5 * 1024 * 1024,
    )
