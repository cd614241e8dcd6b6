"""Conditional deletes (DeleteObject's If-Match, x-amz-if-match-size and
x-amz-if-match-last-modified-time; DeleteObjects entries' ETag, Size, LastModifiedTime), and
If-None-Match on writes taking only `*`. A condition that fails deletes nothing."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

_names = itertools.count()


@pytest.fixture(params=["unversioned", "versioned"])
def bucket(s3: Any, request: pytest.FixtureRequest) -> str:
    name = f"conditional-delete-{next(_names)}"
    s3.create_bucket(Bucket=name)
    if request.param == "versioned":
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def _error(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str]:
    r = exc.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def _live(s3: Any, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_delete_if_match(s3: Any, bucket: str) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["ETag"]
    with pytest.raises(ClientError) as exc:
        s3.delete_object(Bucket=bucket, Key="k", IfMatch='"0123456789abcdef0123456789abcdef"')
    assert _error(exc) == (412, "PreconditionFailed")
    assert _live(s3, bucket, "k") == b"one"
    s3.delete_object(Bucket=bucket, Key="k", IfMatch=etag)
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket=bucket, Key="k")
    assert _error(exc)[0] == 404
    # nothing (or only a delete marker) to match
    with pytest.raises(ClientError) as exc:
        s3.delete_object(Bucket=bucket, Key="k", IfMatch=etag)
    assert _error(exc) == (404, "NoSuchKey")


def test_delete_if_match_names_the_version_it_removes(s3: Any) -> None:
    bucket = f"conditional-delete-{next(_names)}"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"one")
    second = s3.put_object(Bucket=bucket, Key="k", Body=b"two")
    with pytest.raises(ClientError) as exc:  # the current version's ETag, not this version's
        s3.delete_object(Bucket=bucket, Key="k", VersionId=first["VersionId"], IfMatch=second["ETag"])
    assert _error(exc) == (412, "PreconditionFailed")
    s3.delete_object(Bucket=bucket, Key="k", VersionId=first["VersionId"], IfMatch=first["ETag"])
    versions = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert [v["VersionId"] for v in versions] == [second["VersionId"]]


def test_delete_if_size_and_last_modified(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"four")
    modified = s3.head_object(Bucket=bucket, Key="k")["LastModified"]
    for wrong in ({"IfMatchSize": 5}, {"IfMatchLastModifiedTime": modified - timedelta(seconds=1)}):
        with pytest.raises(ClientError) as exc:
            s3.delete_object(Bucket=bucket, Key="k", **wrong)
        assert _error(exc) == (412, "PreconditionFailed")
        assert _live(s3, bucket, "k") == b"four"
    s3.delete_object(Bucket=bucket, Key="k", IfMatchSize=4, IfMatchLastModifiedTime=modified)
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_delete_objects_checks_each_entrys_conditions(s3: Any, bucket: str) -> None:
    etags = {k: s3.put_object(Bucket=bucket, Key=k, Body=k.encode() * 3)["ETag"] for k in "abcd"}
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "a", "ETag": etags["a"]},
        {"Key": "b", "ETag": etags["a"]},
        {"Key": "c", "Size": 3},
        {"Key": "d", "Size": 4},
    ]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["a", "c"]
    assert sorted((e["Key"], e["Code"]) for e in r["Errors"]) == [
        ("b", "PreconditionFailed"), ("d", "PreconditionFailed")]
    assert sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]) == ["b", "d"]


def test_delete_objects_last_modified_time_as_botocore_writes_it(s3: Any, bucket: str) -> None:
    """botocore writes an entry's LastModifiedTime as an HTTP date (its timestampFormat)."""
    for k in "ab":
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    modified = s3.head_object(Bucket=bucket, Key="a")["LastModified"]
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "a", "LastModifiedTime": modified},
        {"Key": "b", "LastModifiedTime": modified - timedelta(days=1)},
    ]})
    assert [d["Key"] for d in r["Deleted"]] == ["a"]
    assert [(e["Key"], e["Code"]) for e in r["Errors"]] == [("b", "PreconditionFailed")]


def test_a_malformed_delete_condition_is_refused(s3: Any, bucket: str, gateway: Any) -> None:
    import httpx
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    url = f"{gateway.url}/{bucket}/k"
    creds = s3._request_signer._credentials
    for header in ({"x-amz-if-match-size": "four"}, {"x-amz-if-match-last-modified-time": "soon"}):
        req = AWSRequest("DELETE", url, headers=header)
        SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
        r = httpx.delete(url, headers=dict(req.headers))
        assert r.status_code == 400 and b"InvalidArgument" in r.content
    assert _live(s3, bucket, "k") == b"x"


def test_if_none_match_on_a_write_takes_only_a_star(s3: Any, bucket: str) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["ETag"]
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfNoneMatch=etag)
    assert _error(exc) == (501, "NotImplemented")
    assert _live(s3, bucket, "k") == b"one"
