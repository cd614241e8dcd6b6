"""S3 APIs crossbeat does not implement are refused with 501 NotImplemented and change
nothing, instead of being served as the plain bucket or object request their path names."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

_names = itertools.count()


@pytest.fixture
def bucket(s3: Any) -> str:
    """A fresh bucket per case (the shared fixture names buckets after the test, not the case)."""
    name = f"unsupported-{next(_names)}"
    s3.create_bucket(Bucket=name)
    return name


def _code(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str]:
    err = exc.value.response
    return err["ResponseMetadata"]["HTTPStatusCode"], err["Error"]["Code"]


def _unchanged(s3: Any, bucket: str, key: str, body: bytes, etag: str) -> None:
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == body and got["ETag"] == etag
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])] == [key]


@pytest.mark.parametrize(
    "call",
    [
        lambda s3, b, k: s3.put_object_legal_hold(Bucket=b, Key=k, LegalHold={"Status": "ON"}),
        lambda s3, b, k: s3.put_object_retention(
            Bucket=b, Key=k, Retention={"Mode": "GOVERNANCE",
                                        "RetainUntilDate": datetime.now(UTC) + timedelta(days=1)}),
        lambda s3, b, k: s3.get_object_legal_hold(Bucket=b, Key=k),
        lambda s3, b, k: s3.get_object_retention(Bucket=b, Key=k),
        lambda s3, b, k: s3.restore_object(Bucket=b, Key=k, RestoreRequest={"Days": 1}),
    ],
    ids=["put-legal-hold", "put-retention", "get-legal-hold", "get-retention",
         "restore"],
)
def test_an_unimplemented_object_api_is_501_and_changes_nothing(s3: Any, bucket: str, call: Any) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"payload")["ETag"]
    with pytest.raises(ClientError) as exc:
        call(s3, bucket, "k")
    assert _code(exc) == (501, "NotImplemented")
    _unchanged(s3, bucket, "k", b"payload", etag)


@pytest.mark.parametrize(
    "call",
    [
        lambda s3, b: s3.put_bucket_website(Bucket=b, WebsiteConfiguration={
            "IndexDocument": {"Suffix": "index.html"}}),
        lambda s3, b: s3.put_bucket_policy(Bucket=b, Policy='{"Version": "2012-10-17", "Statement": []}'),
        lambda s3, b: s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": [
            {"ID": "r", "Status": "Enabled", "Filter": {"Prefix": ""},
             "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]}]}),
        lambda s3, b: s3.get_bucket_metrics_configuration(Bucket=b, Id="m"),
        lambda s3, b: s3.list_bucket_inventory_configurations(Bucket=b),
        lambda s3, b: s3.get_bucket_policy_status(Bucket=b),
    ],
    ids=["put-website", "put-policy", "put-lifecycle-transition", "get-metrics", "list-inventory", "policy-status"],
)
def test_an_unimplemented_bucket_api_is_501_and_changes_nothing(s3: Any, bucket: str, call: Any) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"payload")["ETag"]
    with pytest.raises(ClientError) as exc:
        call(s3, bucket)
    assert _code(exc) == (501, "NotImplemented")
    _unchanged(s3, bucket, "k", b"payload", etag)


@pytest.mark.parametrize(
    ("delete", "get"),
    [
        ("delete_bucket_cors", "get_bucket_cors"),
        ("delete_bucket_lifecycle", "get_bucket_lifecycle_configuration"),
        ("delete_bucket_policy", "get_bucket_policy"),
        ("delete_bucket_encryption", "get_bucket_encryption"),
        ("delete_bucket_website", "get_bucket_website"),
        ("delete_public_access_block", "get_public_access_block"),
    ],
)
def test_deleting_a_configuration_never_stored_keeps_the_bucket(
    s3: Any, bucket: str, delete: str, get: str
) -> None:
    """An empty bucket once went away here: DELETE ?cors was served as DeleteBucket."""
    assert getattr(s3, delete)(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 204
    s3.head_bucket(Bucket=bucket)
    with pytest.raises(ClientError) as exc:
        getattr(s3, get)(Bucket=bucket)
    assert _code(exc)[0] == 404
    with pytest.raises(ClientError) as exc:
        getattr(s3, delete)(Bucket="no-such-bucket-here")
    assert _code(exc) == (404, "NoSuchBucket")


def test_a_bucket_with_object_lock_is_refused_not_created_unprotected(s3: Any) -> None:
    with pytest.raises(ClientError) as exc:
        s3.create_bucket(Bucket="unsupported-locked", ObjectLockEnabledForBucket=True)
    assert _code(exc) == (501, "NotImplemented")
    assert "unsupported-locked" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


_LOCK = {"ObjectLockMode": "GOVERNANCE",
         "ObjectLockRetainUntilDate": datetime.now(UTC) + timedelta(days=1)}


@pytest.mark.parametrize(
    "call",
    [
        lambda s3, b: s3.put_object(Bucket=b, Key="new", Body=b"x", **_LOCK),
        lambda s3, b: s3.put_object(Bucket=b, Key="new", Body=b"x", ObjectLockLegalHoldStatus="ON"),
        lambda s3, b: s3.copy_object(Bucket=b, Key="new", CopySource={"Bucket": b, "Key": "k"}, **_LOCK),
        lambda s3, b: s3.create_multipart_upload(Bucket=b, Key="new", **_LOCK),
    ],
    ids=["put", "put-legal-hold", "copy", "create-multipart"],
)
def test_a_write_asking_for_object_lock_is_refused(s3: Any, bucket: str, call: Any) -> None:
    """No bucket has Object Lock, so, as AWS does for such a bucket, the write is refused
    rather than stored without the protection it asked for."""
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"payload")["ETag"]
    with pytest.raises(ClientError) as exc:
        call(s3, bucket)
    assert _code(exc) == (400, "InvalidRequest")
    assert "Object Lock" in exc.value.response["Error"]["Message"]
    _unchanged(s3, bucket, "k", b"payload", etag)
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


_SSE_C = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": "k" * 32}


@pytest.mark.parametrize(
    "call",
    [
        lambda s3, b: s3.put_object(Bucket=b, Key="new", Body=b"x", ServerSideEncryption="AES256"),
        lambda s3, b: s3.put_object(Bucket=b, Key="new", Body=b"x", ServerSideEncryption="aws:kms",
                                    SSEKMSKeyId="alias/mine"),
        lambda s3, b: s3.put_object(Bucket=b, Key="new", Body=b"x", **_SSE_C),
        lambda s3, b: s3.copy_object(Bucket=b, Key="new", CopySource={"Bucket": b, "Key": "k"},
                                     ServerSideEncryption="AES256"),
        lambda s3, b: s3.create_multipart_upload(Bucket=b, Key="new", ServerSideEncryption="AES256"),
    ],
    ids=["sse-s3", "sse-kms", "sse-c", "copy", "create-multipart"],
)
def test_a_write_asking_for_encryption_is_refused(s3: Any, bucket: str, call: Any) -> None:
    """crossbeat stores data unencrypted: a write that asks otherwise is not stored."""
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"payload")["ETag"]
    with pytest.raises(ClientError) as exc:
        call(s3, bucket)
    assert _code(exc) == (501, "NotImplemented")
    _unchanged(s3, bucket, "k", b"payload", etag)
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_a_part_asking_for_encryption_is_refused(s3: Any, bucket: str) -> None:
    uid = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    with pytest.raises(ClientError) as exc:
        s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=1, Body=b"p", **_SSE_C)
    assert _code(exc) == (501, "NotImplemented")
    assert not s3.list_parts(Bucket=bucket, Key="mp", UploadId=uid).get("Parts")


def test_a_read_with_a_customer_key_is_refused(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"payload")
    for call in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as exc:
            call(Bucket=bucket, Key="k", **_SSE_C)
        assert _code(exc)[0] == 400


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("{b}?versioning", "GET, PUT"),
        ("{b}?versions", "GET"),
        ("{b}?uploads", "GET"),
        ("{b}?website", "DELETE, GET"),
        ("no-such-bucket-here?versioning", "GET, PUT"),  # before the bucket is looked up, as S3
        ("{b}/k?tagging", "DELETE, GET, PUT"),
        ("{b}/k?uploadId=abc", "DELETE, GET, POST, PUT"),
        ("{b}?torrent", None),
    ],
)
def test_a_head_with_a_sub_resource_is_method_not_allowed(gateway: Any, s3: Any, bucket: str, path: str, allow: str | None) -> None:
    """No S3 sub-resource has a HEAD form: 405 with an Allow naming the methods crossbeat
    serves for it, as S3 answers (which names the ones it serves); it was 501."""
    from tests.support.gateway import signed

    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    r = signed("HEAD", f"{gateway.url}/{path.format(b=bucket)}")
    assert r.status_code == 405
    assert r.headers.get("allow") == allow


def test_minios_listen_bucket_notification_is_501(gateway: Any, s3: Any, bucket: str) -> None:
    """MinIO's ListenBucketNotification (`GET /bucket?events=...`): answered with a
    listing, the MinIO SDKs' listeners re-asked in a tight loop, thousands of listings a
    second; a 501 ends them with an error."""
    from tests.support.gateway import signed

    r = signed("GET", f"{gateway.url}/{bucket}?events=s3%3AObjectCreated%3A%2A&prefix=&suffix=")
    assert r.status_code == 501 and b"<Code>NotImplemented</Code>" in r.content


def test_mfa_delete_in_the_minio_spelling_is_refused_and_changes_nothing(gateway: Any, s3: Any, bucket: str) -> None:
    """The MinIO SDKs write `MFADelete`, AWS documents `MfaDelete`: either asks for MFA
    delete, which crossbeat cannot give; it was dropped unnoticed and versioning enabled."""
    from tests.support.gateway import signed

    doc = (b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
           b"<Status>Enabled</Status><MFADelete>Enabled</MFADelete></VersioningConfiguration>")
    r = signed("PUT", f"{gateway.url}/{bucket}?versioning", doc)
    assert r.status_code == 501 and b"MFA delete" in r.content
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
