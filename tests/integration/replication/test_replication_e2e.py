"""End to end: site a → populator → broker → Spark pipelines → site b."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.integration.replication.conftest import Rig, replicated_bucket, versions, wait_replicated

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow,
              pytest.mark.timeout(600)]

N_OBJECTS = int(os.environ.get("CROSSBEAT_E2E_OBJECTS", "500"))


def put_workload(s3: Any, bucket: str, n: int) -> None:
    """n versions: overwrites, user metadata, tags, multipart objects, delete markers."""
    def put(i: int) -> None:
        key = f"obj/{i % (n // 2)}"  # every key written twice on average: overwrites
        body = hashlib.sha256(str(i).encode()).digest() * (1 + i % 40)
        extra: dict[str, Any] = {}
        if i % 3 == 0:
            extra["Metadata"] = {"who": f"writer-{i}", "n": str(i)}
        if i % 5 == 0:
            extra["Tagging"] = f"color=c{i % 7}&idx={i}"
        if i % 11 == 0:
            extra["ContentType"] = "text/plain"
        s3.put_object(Bucket=bucket, Key=key, Body=body, **extra)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(n - 15)))
    for j in range(2):  # multipart: 3 parts, the last short; above the 5 MiB part route
        key = f"big/{j}"
        up = s3.create_multipart_upload(Bucket=bucket, Key=key, Metadata={"kind": "mpu"})
        parts = []
        for p in range(1, 4):
            body = bytes([p + j]) * (5 * 1024 * 1024 if p < 3 else 1234)
            etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"],
                                  PartNumber=p, Body=body)["ETag"]
            parts.append({"PartNumber": p, "ETag": etag})
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": parts})
    for k in range(13):  # delete markers
        s3.delete_object(Bucket=bucket, Key=f"obj/{k}")


def assert_identical(rig: Rig, bucket: str) -> None:
    a, b = rig.s3("a"), rig.s3("b")
    listed = versions(a, bucket)
    assert versions(b, bucket) == listed  # same versionIds, ETags, sizes, order, latest

    def same(entry: tuple[str, str, str, bool, Any]) -> None:
        key, vid, etag, _, _ = entry
        if etag == "DM":
            return
        ga = a.get_object(Bucket=bucket, Key=key, VersionId=vid)
        gb = b.get_object(Bucket=bucket, Key=key, VersionId=vid)
        assert gb["Body"].read() == ga["Body"].read(), key
        for field in ("ETag", "Metadata", "ContentType", "ContentLength", "LastModified"):
            assert gb[field] == ga[field], (key, field)
        assert ga["ReplicationStatus"] == "COMPLETED"
        assert gb["ReplicationStatus"] == "REPLICA"
        ta = a.get_object_tagging(Bucket=bucket, Key=key, VersionId=vid)["TagSet"]
        tb = b.get_object_tagging(Bucket=bucket, Key=key, VersionId=vid)["TagSet"]
        assert sorted(map(str, tb)) == sorted(map(str, ta)), key

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(same, listed))


def test_objects_arrive_identical_at_site_b(rig: Rig) -> None:
    bucket = replicated_bucket(rig, "rep-main")
    put_workload(rig.s3("a"), bucket, N_OBJECTS)
    wait_replicated(rig, bucket, timeout=300)
    assert_identical(rig, bucket)
