"""GetObjectAttributes through boto3: a version's ETag, checksum, parts, storage class and
size without its data, and InvalidArgument for what S3 refuses."""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Any

import pytest
from botocore.exceptions import ClientError

pytestmark = pytest.mark.integration
MiB = 1024 * 1024
ALL = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


def test_a_simple_object_s_attributes(s3: Any, vbucket: str) -> None:
    body = b"attributes"
    put = s3.put_object(Bucket=vbucket, Key="k", Body=body, ChecksumAlgorithm="CRC32C",
                        StorageClass="STANDARD_IA")
    got = s3.get_object_attributes(Bucket=vbucket, Key="k", ObjectAttributes=ALL)
    assert got["ETag"] == hashlib.md5(body).hexdigest()  # unquoted, as S3 answers
    assert got["Checksum"] == {"ChecksumCRC32C": put["ChecksumCRC32C"], "ChecksumType": "FULL_OBJECT"}
    assert "ObjectParts" not in got  # not a multipart upload
    assert got["StorageClass"] == "STANDARD_IA"
    assert got["ObjectSize"] == len(body)
    assert got["VersionId"] == put["VersionId"]
    assert got["LastModified"] == s3.head_object(Bucket=vbucket, Key="k")["LastModified"]
    # only what was asked; an older version by its id
    s3.put_object(Bucket=vbucket, Key="k", Body=b"newer")
    old = s3.get_object_attributes(Bucket=vbucket, Key="k", VersionId=put["VersionId"],
                                   ObjectAttributes=["ObjectSize"])
    assert old["ObjectSize"] == len(body) and "ETag" not in old and "StorageClass" not in old


def test_a_multipart_object_s_parts_and_their_checksums(s3: Any, bucket: str) -> None:
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1000)]
    uid = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="SHA256")["UploadId"]
    done = []
    for i, body in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=i, Body=body,
                           ChecksumAlgorithm="SHA256")
        done.append({"PartNumber": i, "ETag": r["ETag"], "ChecksumSHA256": r["ChecksumSHA256"]})
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={"Parts": done})
    digest = hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).digest()

    got = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=ALL)
    assert got["ETag"] == s3.head_object(Bucket=bucket, Key="mp")["ETag"].strip('"')
    assert got["Checksum"] == {"ChecksumSHA256": base64.b64encode(digest).decode(), "ChecksumType": "COMPOSITE"}
    assert got["ObjectSize"] == sum(map(len, parts))
    op = got["ObjectParts"]
    assert op["TotalPartsCount"] == 3 and op["IsTruncated"] is False
    assert [(p["PartNumber"], p["Size"], p["ChecksumSHA256"]) for p in op["Parts"]] == [
        (i, len(body), d["ChecksumSHA256"]) for i, (body, d) in enumerate(zip(parts, done, strict=True), 1)]

    # paged: after part 1, one part at a time
    page = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"],
                                    MaxParts=1, PartNumberMarker=1)["ObjectParts"]
    assert [p["PartNumber"] for p in page["Parts"]] == [2]
    assert page["IsTruncated"] is True and page["NextPartNumberMarker"] == 2
    assert page["PartNumberMarker"] == 1 and page["MaxParts"] == 1


def test_a_multipart_object_without_checksums_gives_its_part_count_only(s3: Any, bucket: str) -> None:
    # AWS lists parts only for an upload made with an additional checksum; otherwise
    # ObjectParts is <PartsCount> alone (what s3cmd's and rclone's uploads get)
    uid = s3.create_multipart_upload(Bucket=bucket, Key="plain")["UploadId"]
    done = []
    for i, body in enumerate([os.urandom(5 * MiB), b"tail"], 1):
        r = s3.upload_part(Bucket=bucket, Key="plain", UploadId=uid, PartNumber=i, Body=body)
        done.append({"PartNumber": i, "ETag": r["ETag"]})
    s3.complete_multipart_upload(Bucket=bucket, Key="plain", UploadId=uid, MultipartUpload={"Parts": done})
    got = s3.get_object_attributes(Bucket=bucket, Key="plain", ObjectAttributes=["ObjectParts", "Checksum"])
    assert got["ObjectParts"] == {"TotalPartsCount": 2}
    assert "Checksum" not in got


@pytest.mark.parametrize("names", [[], ["Size"], ["ETag", "Owner"]], ids=["none", "unknown", "one-unknown"])
def test_missing_or_unknown_attribute_names_are_invalid_argument(s3: Any, bucket: str, names: list[str]) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    with pytest.raises(ClientError) as exc:
        s3.get_object_attributes(Bucket=bucket, Key="k", ObjectAttributes=names)
    err = exc.value.response
    assert (err["ResponseMetadata"]["HTTPStatusCode"], err["Error"]["Code"]) == (400, "InvalidArgument")


def test_missing_objects_and_delete_markers_answer_as_get_does(s3: Any, alice: Any, vbucket: str) -> None:
    with pytest.raises(ClientError) as exc:
        s3.get_object_attributes(Bucket=vbucket, Key="nothing", ObjectAttributes=["ETag"])
    assert exc.value.response["Error"]["Code"] == "NoSuchKey"
    s3.put_object(Bucket=vbucket, Key="gone", Body=b"x")
    marker = s3.delete_object(Bucket=vbucket, Key="gone")["VersionId"]
    with pytest.raises(ClientError) as exc:
        s3.get_object_attributes(Bucket=vbucket, Key="gone", ObjectAttributes=["ETag"])
    assert exc.value.response["Error"]["Code"] == "NoSuchKey"
    assert exc.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
    with pytest.raises(ClientError) as exc:
        s3.get_object_attributes(Bucket=vbucket, Key="gone", VersionId=marker, ObjectAttributes=["ETag"])
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 405
    with pytest.raises(ClientError) as exc:  # another user's bucket
        alice.get_object_attributes(Bucket=vbucket, Key="gone", ObjectAttributes=["ETag"])
    assert exc.value.response["Error"]["Code"] == "AccessDenied"
