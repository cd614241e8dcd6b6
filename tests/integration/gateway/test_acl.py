"""ACLs as on an AWS bucket with Object Ownership BucketOwnerEnforced: an ACL granting more
than the owner's full control is refused and changes nothing, never silently dropped."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import ROOT_AK

_names = itertools.count()
_PUBLIC_GRANT = {"Grants": [{"Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"},
                             "Permission": "READ"}], "Owner": {"ID": ROOT_AK}}
_OWNER_ONLY = {"Grants": [{"Grantee": {"Type": "CanonicalUser", "ID": ROOT_AK}, "Permission": "FULL_CONTROL"}],
               "Owner": {"ID": ROOT_AK}}


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"acl-{next(_names)}"
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="k", Body=b"payload")
    return name


def _code(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str]:
    r = exc.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


@pytest.mark.parametrize(
    "call",
    [
        lambda s3, b: s3.put_object(Bucket=b, Key="new", Body=b"x", ACL="public-read"),
        lambda s3, b: s3.put_object(Bucket=b, Key="new", Body=b"x", GrantRead="uri=http://acs.amazonaws.com/groups/global/AllUsers"),
        lambda s3, b: s3.copy_object(Bucket=b, Key="new", CopySource={"Bucket": b, "Key": "k"}, ACL="authenticated-read"),
        lambda s3, b: s3.create_multipart_upload(Bucket=b, Key="new", ACL="public-read-write"),
        lambda s3, b: s3.put_object_acl(Bucket=b, Key="k", ACL="public-read"),
        lambda s3, b: s3.put_object_acl(Bucket=b, Key="k", AccessControlPolicy=_PUBLIC_GRANT),
        lambda s3, b: s3.put_bucket_acl(Bucket=b, ACL="public-read"),
        lambda s3, b: s3.put_bucket_acl(Bucket=b, AccessControlPolicy=_PUBLIC_GRANT),
    ],
    ids=["put", "put-grant", "copy", "create-multipart", "object-acl", "object-acl-policy",
         "bucket-acl", "bucket-acl-policy"],
)
def test_an_acl_beyond_the_owner_is_refused(s3: Any, bucket: str, call: Any) -> None:
    with pytest.raises(ClientError) as exc:
        call(s3, bucket)
    assert _code(exc) == (400, "AccessControlListNotSupported")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_owner_only_acls_are_accepted(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="a", Body=b"x", ACL="private")
    s3.put_object(Bucket=bucket, Key="b", Body=b"x", ACL="bucket-owner-full-control")
    s3.put_object_acl(Bucket=bucket, Key="k", AccessControlPolicy=_OWNER_ONLY)
    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    grants = s3.get_object_acl(Bucket=bucket, Key="k")["Grants"]
    assert [(g["Grantee"]["ID"], g["Permission"]) for g in grants] == [(ROOT_AK, "FULL_CONTROL")]


def test_ownership_controls_are_bucket_owner_enforced(s3: Any, bucket: str) -> None:
    rules = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    s3.put_bucket_ownership_controls(Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
    with pytest.raises(ClientError) as exc:
        s3.put_bucket_ownership_controls(Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": "ObjectWriter"}]})
    assert _code(exc) == (501, "NotImplemented")
    with pytest.raises(ClientError) as exc:
        s3.delete_bucket_ownership_controls(Bucket=bucket)
    assert _code(exc) == (501, "NotImplemented")
    assert s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"] == rules


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"ACL": "public-read"}, (400, "InvalidBucketAclWithObjectOwnership")),
        ({"ObjectOwnership": "ObjectWriter"}, (501, "NotImplemented")),
    ],
)
def test_create_bucket_with_acls_is_refused(s3: Any, kwargs: dict[str, str], expected: tuple[int, str]) -> None:
    name = f"acl-refused-{next(_names)}"
    with pytest.raises(ClientError) as exc:
        s3.create_bucket(Bucket=name, **kwargs)
    assert _code(exc) == expected
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.create_bucket(Bucket=name, ACL="private", ObjectOwnership="BucketOwnerEnforced")


def test_expected_bucket_owner_must_name_the_owner(s3: Any, bucket: str) -> None:
    """x-amz-expected-bucket-owner (boto3's ExpectedBucketOwner) and, for a copy's source,
    x-amz-source-expected-bucket-owner: AccessDenied unless they name the bucket's owner
    (its account id here: the owner's access key, the Owner ID crossbeat shows). They were
    ignored."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="k", ExpectedBucketOwner="999999999999")
    assert _code(exc) == (403, "AccessDenied")
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket=bucket, Key="k2", Body=b"w", ExpectedBucketOwner="999999999999")
    assert _code(exc) == (403, "AccessDenied")
    with pytest.raises(ClientError) as exc:
        s3.copy_object(Bucket=bucket, Key="k3", CopySource={"Bucket": bucket, "Key": "k"},
                       ExpectedSourceBucketOwner="999999999999")
    assert _code(exc) == (403, "AccessDenied")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 1
    owner = s3.get_bucket_acl(Bucket=bucket)["Owner"]["ID"]
    assert owner == ROOT_AK
    assert s3.get_object(Bucket=bucket, Key="k", ExpectedBucketOwner=owner)["Body"].read() == b"v"
