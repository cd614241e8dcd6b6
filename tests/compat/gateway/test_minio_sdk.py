"""The MinIO Python SDK (`minio`), a widely used S3 client, against the gateway: versioned
buckets, streamed (unknown-length) and file multipart uploads, compose (UploadPartCopy with
ranges), tags, presigned URLs, and clean refusals of what crossbeat does not do (MFA delete
in the SDK's spelling, MinIO's ListenBucketNotification)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway import ROOT_AK, ROOT_SK
from tests.support.procs import Service

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def mc(gateway: Service) -> Any:
    from minio import Minio

    return Minio(gateway.address, access_key=ROOT_AK, secret_key=ROOT_SK, secure=False)


def test_versioned_uploads_compose_and_tags_round_trip(mc: Any, tmp_path: Path) -> None:
    from minio.commonconfig import ENABLED, ComposeSource, Tags
    from minio.versioningconfig import VersioningConfig

    mc.make_bucket("minio-sdk")
    mc.set_bucket_versioning("minio-sdk", VersioningConfig(ENABLED))
    assert mc.get_bucket_versioning("minio-sdk").status == ENABLED

    # unknown length: the SDK streams a multipart upload in part_size pieces
    streamed = os.urandom(12 * MIB + 123)
    tags = Tags.new_object_tags()
    tags["team"] = "storage ops"
    first = mc.put_object("minio-sdk", "streamed", io.BytesIO(streamed), length=-1, part_size=5 * MIB,
                          metadata={"x-amz-meta-origin": "sdk"}, tags=tags)
    second = mc.put_object("minio-sdk", "streamed", io.BytesIO(b"second"), length=6)
    assert first.version_id != second.version_id
    old = mc.get_object("minio-sdk", "streamed", version_id=first.version_id)
    try:
        assert old.read() == streamed
    finally:
        old.close()
        old.release_conn()
    stat = mc.stat_object("minio-sdk", "streamed", version_id=first.version_id)
    assert stat.etag == first.etag and stat.metadata["x-amz-meta-origin"] == "sdk"
    assert dict(mc.get_object_tags("minio-sdk", "streamed", version_id=first.version_id)) == {"team": "storage ops"}

    # a file in parts, then composed from ranges of two sources
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(11 * MIB))
    mc.fput_object("minio-sdk", "big", str(src), part_size=5 * MIB)
    out = tmp_path / "back.bin"
    mc.fget_object("minio-sdk", "big", str(out))
    assert out.read_bytes() == src.read_bytes()
    mc.compose_object("minio-sdk", "composed", [
        ComposeSource("minio-sdk", "big", offset=0, length=6 * MIB),
        ComposeSource("minio-sdk", "streamed", version_id=first.version_id, offset=MIB, length=5 * MIB),
    ])
    composed = mc.get_object("minio-sdk", "composed")
    try:
        assert composed.read() == src.read_bytes()[:6 * MIB] + streamed[MIB:6 * MIB]
    finally:
        composed.close()
        composed.release_conn()
    listed = [(o.object_name, o.version_id) for o in mc.list_objects("minio-sdk", include_version=True)]
    assert ("streamed", first.version_id) in listed and ("streamed", second.version_id) in listed


def test_presigned_urls_work_with_a_plain_http_client(mc: Any) -> None:
    from datetime import timedelta

    mc.make_bucket("minio-presigned")
    put_url = mc.presigned_put_object("minio-presigned", "p k", expires=timedelta(minutes=5))
    assert httpx.put(put_url, content=b"presigned body").status_code == 200
    get_url = mc.presigned_get_object("minio-presigned", "p k", expires=timedelta(minutes=5))
    assert httpx.get(get_url).content == b"presigned body"
    assert httpx.get(get_url.replace("X-Amz-Signature=", "X-Amz-Signature=0")).status_code == 403


def test_what_crossbeat_does_not_do_is_refused_cleanly(mc: Any) -> None:
    from minio.commonconfig import ENABLED
    from minio.error import S3Error
    from minio.versioningconfig import VersioningConfig

    mc.make_bucket("minio-refused")
    with pytest.raises(S3Error) as mfa:  # the SDK writes <MFADelete>
        mc.set_bucket_versioning("minio-refused", VersioningConfig(ENABLED, mfa_delete=ENABLED))
    assert mfa.value.code == "NotImplemented"
    assert mc.get_bucket_versioning("minio-refused").status is None  # nothing changed: never enabled
    # was a listing, which the SDK re-asked forever
    with pytest.raises(S3Error) as listen, \
            mc.listen_bucket_notification("minio-refused", events=["s3:ObjectCreated:*"]) as events:
        next(iter(events))
    assert listen.value.code == "NotImplemented"
