"""A replica is checked against its destination bucket as the commit sees it, not only as
it was when the request began: versioning suspended while a replica's body streams in
refuses that replica, and its data is not left behind."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support.gateway import ROOT_AK, ROOT_SK, running_gateway, s3_client, signed
from tests.support.procs import Service

pytestmark = pytest.mark.integration

# Larger than the loopback socket buffers on both sides together: once the client has
# handed this much to the kernel, the gateway has read part of the body, so it has
# checked the bucket already.
FIRST = 24 * 1024 * 1024
REST = 1024 * 1024


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("replica-bucket")) / "data"


@pytest.fixture(scope="module")
def gateway(data_dir: Path) -> Iterator[Service]:
    with running_gateway(data_dir) as svc:
        yield svc


def manifests(data_dir: Path) -> set[Path]:
    return set(data_dir.rglob("manifest.json"))


def replica_metadata(gateway: Service, s3: Any, bucket: str, size: int) -> dict[str, Any]:
    """Metadata for a replica of `size` bytes, taken from a real version's (etag left out:
    a multipart-looking one is not checked against the bytes' MD5)."""
    vid = s3.put_object(Bucket=bucket, Key="model", Body=b"x")["VersionId"]
    meta = signed("GET", f"{gateway.url}/_/crossbeat/metadata/{bucket}/model?versionId={vid}").json()
    meta = {k: v for k, v in meta.items() if k not in ("replicationInfo", "revision", "isLatest")}
    meta.update(key="r", versionId="v-streamed", sortKey="0" * 26, size=size, etag="0" * 32 + "-2")
    return meta


def test_versioning_suspended_while_a_replica_streams_in_refuses_it(gateway: Service, data_dir: Path) -> None:
    s3 = s3_client(gateway.url)
    bucket = "dest"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    body = b"a" * FIRST + b"b" * REST
    meta = replica_metadata(gateway, s3, bucket, len(body))
    before = manifests(data_dir)

    url = f"{gateway.url}/_/crossbeat/replica/{bucket}/r?versionId=v-streamed"
    headers = {"x-amz-crossbeat-metadata": base64.urlsafe_b64encode(json.dumps(meta).encode()).decode()}
    req = AWSRequest(method="PUT", url=url, data=body, headers=headers)
    S3SigV4Auth(Credentials(ROOT_AK, ROOT_SK), "s3", "us-east-1").add_auth(req)
    sent = {k: v for k, v in req.headers.items()}
    sent["Content-Length"] = str(len(body))

    def stream() -> Iterator[bytes]:
        yield body[:FIRST]
        # the gateway is reading the body now, past its check of the bucket
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
        yield body[FIRST:]

    r = httpx.put(url, content=stream(), headers=sent, timeout=60)
    assert r.status_code == 409, r.text
    assert "DstBucketUnversioned" in r.text and "InvalidBucketState" in r.text
    listed = s3.list_object_versions(Bucket=bucket, Prefix="r")
    assert not listed.get("Versions") and not listed.get("DeleteMarkers")
    assert manifests(data_dir) - before == set()  # its data deleted, not left for cleanup
