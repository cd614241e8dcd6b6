from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import USER_AK, USER_SK, running_gateway, s3_client
from tests.support.procs import Service


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_gateway(Path(tmp_path_factory.mktemp("gw")) / "data") as svc:
        yield svc


@pytest.fixture(scope="module")
def s3(gateway: Service) -> Any:
    return s3_client(gateway.url)


@pytest.fixture(scope="module")
def alice(gateway: Service) -> Any:
    return s3_client(gateway.url, USER_AK, USER_SK)


@pytest.fixture
def bucket(s3: Any, request: pytest.FixtureRequest) -> str:
    # the test's name, cut, and a digest of its full id: parametrized cases get their own
    name = "t-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    name = "".join(c for c in name if c.isascii() and (c.isalnum() or c == "-")).strip("-")
    name += "-" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def vbucket(s3: Any, bucket: str) -> str:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    return bucket
