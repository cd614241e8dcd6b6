"""The storage class: validated on every write, recorded, and reported alike by HEAD and
by every listing (crossbeat stores every class in the bucket's repository)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError


def test_a_storage_class_is_reported_by_head_and_every_listing(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="ia", Body=b"x", StorageClass="STANDARD_IA")
    s3.put_object(Bucket=bucket, Key="std", Body=b"x", StorageClass="STANDARD")
    s3.put_object(Bucket=bucket, Key="plain", Body=b"x")
    assert s3.head_object(Bucket=bucket, Key="ia")["StorageClass"] == "STANDARD_IA"
    # as on AWS, HEAD says nothing for STANDARD
    assert "StorageClass" not in s3.head_object(Bucket=bucket, Key="std")
    expected = {"ia": "STANDARD_IA", "plain": "STANDARD", "std": "STANDARD"}
    v2 = s3.list_objects_v2(Bucket=bucket)["Contents"]
    v1 = s3.list_objects(Bucket=bucket)["Contents"]
    versions = s3.list_object_versions(Bucket=bucket)["Versions"]
    for listing in (v2, v1, versions):
        assert {o["Key"]: o["StorageClass"] for o in listing} == expected


def test_copy_takes_the_requests_storage_class_not_the_sources(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"x", StorageClass="GLACIER_IR")
    s3.copy_object(Bucket=bucket, Key="plain", CopySource={"Bucket": bucket, "Key": "src"})
    s3.copy_object(Bucket=bucket, Key="oz", CopySource={"Bucket": bucket, "Key": "src"},
                   StorageClass="ONEZONE_IA")
    assert "StorageClass" not in s3.head_object(Bucket=bucket, Key="plain")
    assert s3.head_object(Bucket=bucket, Key="oz")["StorageClass"] == "ONEZONE_IA"


def test_a_multipart_upload_keeps_its_storage_class(s3: Any, bucket: str) -> None:
    uid = s3.create_multipart_upload(Bucket=bucket, Key="mp", StorageClass="INTELLIGENT_TIERING")["UploadId"]
    assert s3.list_multipart_uploads(Bucket=bucket)["Uploads"][0]["StorageClass"] == "INTELLIGENT_TIERING"
    assert s3.list_parts(Bucket=bucket, Key="mp", UploadId=uid)["StorageClass"] == "INTELLIGENT_TIERING"
    etag = s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=1, Body=b"p")["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert s3.list_objects_v2(Bucket=bucket)["Contents"][0]["StorageClass"] == "INTELLIGENT_TIERING"


@pytest.mark.parametrize(
    "call",
    [
        lambda s3, b: s3.put_object(Bucket=b, Key="new", Body=b"x", StorageClass="BOGUS"),
        lambda s3, b: s3.copy_object(Bucket=b, Key="new", CopySource={"Bucket": b, "Key": "k"},
                                     StorageClass="standard"),
        lambda s3, b: s3.create_multipart_upload(Bucket=b, Key="new", StorageClass="COLD"),
    ],
    ids=["put", "copy", "create-multipart"],
)
def test_an_unknown_storage_class_is_refused(s3: Any, bucket: str, call: Any) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    with pytest.raises(ClientError) as exc:
        call(s3, bucket)
    assert exc.value.response["Error"]["Code"] == "InvalidStorageClass"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")
