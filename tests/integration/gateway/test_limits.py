"""The object size limit (`max_object_bytes`): refused with EntityTooLarge, nothing stored."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import httpx
import pytest

from tests.support.gateway import running_gateway, s3_client
from tests.support.procs import Service, wait_until

pytestmark = pytest.mark.integration
MiB = 1024 * 1024
LIMIT = 2 * MiB
CHUNK = 256 * 1024


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("limits")) / "data"


@pytest.fixture(scope="module")
def gateway(data_dir: Path) -> Iterator[Service]:
    # chunks of 256 KiB: a streamed body reaches the disk before it reaches the limit
    config = f"[gateway]\nmax_object_bytes = {LIMIT}\nchunk_size = {CHUNK}\n"
    with running_gateway(data_dir, config=config) as svc:
        yield svc


@pytest.fixture(scope="module")
def s3(gateway: Service) -> Any:
    client = s3_client(gateway.url)
    client.create_bucket(Bucket="limited")
    return client


def _stored(data_dir: Path) -> set[Path]:
    """Object directories (`{fanout}/{objectId}`, complete or not) in the default repository.
    No PUT here is small, so the helper that makes directories ahead (sfs_prepared) never
    starts."""
    return {p for p in (data_dir / "sfs").glob("*/*") if p.is_dir()}


def test_a_declared_length_over_the_limit_is_refused_before_the_body(data_dir: Path, s3: Any) -> None:
    before = _stored(data_dir)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket="limited", Key="too-big", Body=os.urandom(LIMIT + 1))
    assert exc.value.response["Error"]["Code"] == "EntityTooLarge"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert "Contents" not in s3.list_objects_v2(Bucket="limited", Prefix="too-big")
    assert _stored(data_dir) == before


def test_an_object_of_exactly_the_limit_is_stored(s3: Any) -> None:
    body = os.urandom(LIMIT)
    s3.put_object(Bucket="limited", Key="at-limit", Body=body)
    assert s3.get_object(Bucket="limited", Key="at-limit")["Body"].read() == body


def test_a_streamed_body_over_the_limit_is_refused_and_its_data_removed(
    data_dir: Path, s3: Any
) -> None:
    """No Content-Length (HTTP chunked): the limit is found mid-stream; the partial object
    is aborted, leaving no version and no object directory."""
    before = _stored(data_dir)
    url = s3.generate_presigned_url(
        "put_object", Params={"Bucket": "limited", "Key": "streamed"}, ExpiresIn=600
    )
    piece = os.urandom(256 * 1024)

    def body() -> Iterator[bytes]:
        for _ in range(LIMIT // len(piece) + 1):  # one piece more than the limit allows
            yield piece

    response = httpx.put(url, content=body(), timeout=60)
    assert response.status_code == 400, response.text
    assert "<Code>EntityTooLarge</Code>" in response.text
    assert "Contents" not in s3.list_objects_v2(Bucket="limited", Prefix="streamed")
    wait_until(lambda: _stored(data_dir) == before, timeout=10, what="the aborted object removed")


def test_a_multipart_object_over_the_limit_is_refused_at_complete(tmp_path: Path) -> None:
    """The parts' sum is the object's size: over max_object_bytes, Complete is EntityTooLarge
    and the upload stays (to be aborted). Three parts of 600 bytes made an 1800-byte object
    under a 1000-byte limit."""
    config = "[gateway]\nmax_object_bytes = 1000\nmin_part_bytes = 1\n"
    with running_gateway(tmp_path / "data", config=config) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="bounded")
        uid = s3.create_multipart_upload(Bucket="bounded", Key="k")["UploadId"]
        parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket="bounded", Key="k", UploadId=uid, PartNumber=n,
                                                          Body=b"p" * 600)["ETag"]}
                 for n in (1, 2, 3)]  # fmt: skip
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.complete_multipart_upload(Bucket="bounded", Key="k", UploadId=uid, MultipartUpload={"Parts": parts})
        assert exc.value.response["Error"]["Code"] == "EntityTooLarge"
        assert "Contents" not in s3.list_objects_v2(Bucket="bounded")
        assert len(s3.list_parts(Bucket="bounded", Key="k", UploadId=uid)["Parts"]) == 3
        s3.complete_multipart_upload(Bucket="bounded", Key="k", UploadId=uid, MultipartUpload={"Parts": parts[:1]})
        assert s3.head_object(Bucket="bounded", Key="k")["ContentLength"] == 600
