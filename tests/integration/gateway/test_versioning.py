from __future__ import annotations

from typing import Any

import botocore.exceptions
import pytest

pytestmark = pytest.mark.integration


def status(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> int:
    return int(exc.value.response["ResponseMetadata"]["HTTPStatusCode"])


def test_never_versioned_bucket(s3: Any, bucket: str) -> None:
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    r = s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    assert "VersionId" not in r
    s3.put_object(Bucket=bucket, Key="k", Body=b"2")
    vs = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert [(v["VersionId"], v["IsLatest"]) for v in vs] == [("null", True)]
    assert s3.get_object(Bucket=bucket, Key="k", VersionId="null")["Body"].read() == b"2"
    s3.delete_object(Bucket=bucket, Key="k")
    assert "Versions" not in s3.list_object_versions(Bucket=bucket)
    assert "DeleteMarkers" not in s3.list_object_versions(Bucket=bucket)


def test_enabled_versions_and_delete_markers(s3: Any, vbucket: str) -> None:
    b = vbucket
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=b, Key="k", Body=b"two")["VersionId"]
    assert v1 != v2 and "null" not in (v1, v2)
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"two"
    assert s3.get_object(Bucket=b, Key="k", VersionId=v1)["Body"].read() == b"one"
    d = s3.delete_object(Bucket=b, Key="k")
    assert d["DeleteMarker"] is True
    marker = d["VersionId"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=b, Key="k")
    assert status(exc) == 404
    assert exc.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.head_object(Bucket=b, Key="k", VersionId=marker)
    assert status(exc) == 405
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=b, Key="k", VersionId="00000000000000000000000000")
    assert exc.value.response["Error"]["Code"] == "NoSuchVersion"
    listing = s3.list_object_versions(Bucket=b)
    assert [v["VersionId"] for v in listing["Versions"]] == [v2, v1]
    assert [(m["VersionId"], m["IsLatest"]) for m in listing["DeleteMarkers"]] == [(marker, True)]
    # removing the marker restores the previous version
    r = s3.delete_object(Bucket=b, Key="k", VersionId=marker)
    assert r["DeleteMarker"] is True
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"two"
    s3.delete_object(Bucket=b, Key="k", VersionId=v2)
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"one"
    assert "Contents" in s3.list_objects_v2(Bucket=b)


def test_suspended_bucket_overwrites_null_version(s3: Any, vbucket: str) -> None:
    b = vbucket
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"versioned")["VersionId"]
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Suspended"
    assert s3.put_object(Bucket=b, Key="k", Body=b"null-1")["VersionId"] == "null"
    s3.put_object(Bucket=b, Key="k", Body=b"null-2")
    ids = [v["VersionId"] for v in s3.list_object_versions(Bucket=b)["Versions"]]
    assert ids == ["null", v1]
    d = s3.delete_object(Bucket=b, Key="k")
    assert d["DeleteMarker"] is True and d["VersionId"] == "null"
    listing = s3.list_object_versions(Bucket=b)
    assert [v["VersionId"] for v in listing["Versions"]] == [v1]
    assert [m["VersionId"] for m in listing["DeleteMarkers"]] == ["null"]


def test_versioning_cannot_go_back(s3: Any, vbucket: str) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_bucket_versioning(Bucket=vbucket, VersioningConfiguration={"Status": "Disabled"})
    assert status(exc) == 400


def test_list_versions_pagination(s3: Any, vbucket: str) -> None:
    expected = []
    for key in ("a", "b", "c"):
        ids = [s3.put_object(Bucket=vbucket, Key=key, Body=key.encode() * i)["VersionId"] for i in range(4)]
        expected += [(key, v) for v in reversed(ids)]
    seen = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=vbucket, PaginationConfig={"PageSize": 5}):
        seen += [(v["Key"], v["VersionId"]) for v in page.get("Versions", [])]
    assert seen == expected


def test_delete_objects_with_versions(s3: Any, vbucket: str) -> None:
    v = s3.put_object(Bucket=vbucket, Key="x", Body=b"1")["VersionId"]
    r = s3.delete_objects(Bucket=vbucket, Delete={"Objects": [{"Key": "x", "VersionId": v}, {"Key": "y"}]})
    by_key = {d["Key"]: d for d in r["Deleted"]}
    assert by_key["x"]["VersionId"] == v
    assert by_key["y"]["DeleteMarker"] is True and by_key["y"]["DeleteMarkerVersionId"]
