"""Lifecycle configuration over the wire: boto3 round trips, AWS errors, the checksum AWS
requires on PUT, DELETE, and refusals that leave the stored configuration unchanged."""

from __future__ import annotations

import base64
import hashlib
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import signed
from tests.support.procs import Service


def _error(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str]:
    return exc.value.response["ResponseMetadata"]["HTTPStatusCode"], exc.value.response["Error"]["Code"]


RULES: list[dict[str, Any]] = [
    {"ID": "expire-logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}},
    {"ID": "dated", "Status": "Disabled", "Filter": {"Tag": {"Key": "k", "Value": "v"}},
     "Expiration": {"Date": datetime(2030, 1, 1, tzinfo=UTC)}},
    {"ID": "markers", "Status": "Enabled", "Filter": {},
     "Expiration": {"ExpiredObjectDeleteMarker": True},
     "NoncurrentVersionExpiration": {"NoncurrentDays": 7, "NewerNoncurrentVersions": 2},
     "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 3}},
    {"ID": "sized", "Status": "Enabled",
     "Filter": {"And": {"Prefix": "big/", "Tags": [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}],
                        "ObjectSizeGreaterThan": 1024, "ObjectSizeLessThan": 4096}},
     "Expiration": {"Days": 1}},
    {"ID": "small", "Status": "Enabled", "Filter": {"ObjectSizeLessThan": 10}, "Expiration": {"Days": 2}},
]


def test_a_configuration_round_trips_through_boto3(s3: Any, bucket: str) -> None:
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": RULES})
    got = s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert got["Rules"] == RULES
    assert got["TransitionDefaultMinimumObjectSize"] == "all_storage_classes_128K"


def test_the_transition_size_default_is_kept(s3: Any, bucket: str) -> None:
    put = s3.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": RULES[:1]},
        TransitionDefaultMinimumObjectSize="varies_by_storage_class")
    assert put["TransitionDefaultMinimumObjectSize"] == "varies_by_storage_class"
    got = s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert got["TransitionDefaultMinimumObjectSize"] == "varies_by_storage_class"
    with pytest.raises(ClientError) as exc:
        s3.put_bucket_lifecycle_configuration(
            Bucket=bucket, LifecycleConfiguration={"Rules": RULES},
            TransitionDefaultMinimumObjectSize="all_storage_classes_1K")
    assert _error(exc) == (400, "InvalidArgument")
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"] == RULES[:1]


def test_the_legacy_put_bucket_lifecycle_round_trips(s3: Any, bucket: str) -> None:
    rules = [{"ID": "v1", "Prefix": "old/", "Status": "Enabled", "Expiration": {"Days": 5}}]
    s3.put_bucket_lifecycle(Bucket=bucket, LifecycleConfiguration={"Rules": rules})
    assert s3.get_bucket_lifecycle(Bucket=bucket)["Rules"] == rules
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"] == rules


def test_delete_removes_the_configuration_and_keeps_the_bucket(s3: Any, bucket: str) -> None:
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": RULES[:1]})
    assert s3.delete_bucket_lifecycle(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert _error(exc) == (404, "NoSuchLifecycleConfiguration")
    s3.head_bucket(Bucket=bucket)


@pytest.mark.parametrize(
    ("rules", "error"),
    [
        ([{"ID": "x" * 256, "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 1}}],
         (400, "InvalidArgument")),
        ([{"ID": "a", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 1}},
          {"ID": "a", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 2}}], (400, "InvalidArgument")),
        ([{"ID": "a", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 0}}], (400, "InvalidArgument")),
        ([{"ID": "a", "Status": "Enabled", "Filter": {},
           "Expiration": {"Date": datetime(2030, 1, 1, 12, tzinfo=UTC)}}], (400, "InvalidArgument")),
        ([{"ID": "a", "Status": "Enabled", "Filter": {}}], (400, "InvalidRequest")),
        ([{"ID": "a", "Status": "Enabled", "Filter": {"Tag": {"Key": "k", "Value": "v"}},
           "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}], (400, "InvalidRequest")),
        ([{"ID": "a", "Status": "Enabled", "Filter": {},
           "Expiration": {"Days": 1, "ExpiredObjectDeleteMarker": True}}], (400, "MalformedXML")),
        ([{"ID": "a", "Status": "Enabled", "Filter": {"Prefix": "a", "ObjectSizeLessThan": 5},
           "Expiration": {"Days": 1}}], (400, "MalformedXML")),
        ([{"ID": "a", "Status": "Enabled", "Filter": {},
           "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]}], (501, "NotImplemented")),
        ([{"ID": "a", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 1},
           "NoncurrentVersionTransitions": [{"NoncurrentDays": 1, "StorageClass": "GLACIER"}]}],
         (501, "NotImplemented")),
    ],
    ids=["long-id", "duplicate-id", "zero-days", "date-not-midnight", "no-action", "abort-with-tag",
         "eodm-with-days", "two-predicates", "transition", "noncurrent-transition"],
)
def test_an_invalid_configuration_is_refused_and_changes_nothing(
    s3: Any, bucket: str, rules: list[dict[str, Any]], error: tuple[int, str]
) -> None:
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": RULES[:1]})
    with pytest.raises(ClientError) as exc:
        s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": rules})
    assert _error(exc) == error
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"] == RULES[:1]


BODY = (b'<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Rule><ID>r</ID>'
        b"<Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>"
        b"</LifecycleConfiguration>")


def test_put_without_content_md5_or_a_checksum_is_refused(gateway: Service, s3: Any, bucket: str) -> None:
    response = signed("PUT", f"{gateway.url}/{bucket}?lifecycle", BODY)
    assert response.status_code == 400
    assert b"<Code>InvalidRequest</Code>" in response.content
    assert b"Content-MD5 OR x-amz-checksum-*" in response.content
    with pytest.raises(ClientError):
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)


def test_put_with_content_md5_is_verified(gateway: Service, s3: Any, bucket: str) -> None:
    md5 = base64.b64encode(hashlib.md5(BODY).digest()).decode()
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    response = signed("PUT", f"{gateway.url}/{bucket}?lifecycle", BODY, {"Content-MD5": wrong})
    assert response.status_code == 400 and b"BadDigest" in response.content
    with pytest.raises(ClientError):
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    response = signed("PUT", f"{gateway.url}/{bucket}?lifecycle", BODY, {"Content-MD5": md5})
    assert response.status_code == 200, response.content
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"][0]["ID"] == "r"


def test_another_users_bucket_is_access_denied(alice: Any, s3: Any, bucket: str) -> None:
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": RULES[:1]})
    for call in (
        lambda: alice.get_bucket_lifecycle_configuration(Bucket=bucket),
        lambda: alice.delete_bucket_lifecycle(Bucket=bucket),
        lambda: alice.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": RULES}),
    ):
        with pytest.raises(ClientError) as exc:
            call()
        assert _error(exc) == (403, "AccessDenied")
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"] == RULES[:1]


def _midnight_after(moment: datetime, days: int) -> datetime:
    end = moment.timestamp() + days * 86400
    return datetime.fromtimestamp(-(-end // 86400) * 86400, UTC)


def test_x_amz_expiration_names_the_expiry_and_the_rule(s3: Any, vbucket: str) -> None:
    from email.utils import format_datetime

    s3.put_bucket_lifecycle_configuration(Bucket=vbucket, LifecycleConfiguration={"Rules": [
        {"ID": "thirty days", "Status": "Enabled", "Filter": {"Prefix": "exp/"}, "Expiration": {"Days": 30}},
        {"ID": "old", "Status": "Enabled", "Filter": {"Prefix": "exp/"},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1}},
    ]})
    put = s3.put_object(Bucket=vbucket, Key="exp/a", Body=b"x")
    head = s3.head_object(Bucket=vbucket, Key="exp/a")
    expected = (f'expiry-date="{format_datetime(_midnight_after(head["LastModified"], 30), usegmt=True)}",'
                ' rule-id="thirty%20days"')
    assert put["Expiration"] == expected
    assert head["Expiration"] == expected
    assert s3.get_object(Bucket=vbucket, Key="exp/a")["Expiration"] == expected
    # the other ways to write an object answer it too: CopyObject, CompleteMultipartUpload
    copied = s3.copy_object(Bucket=vbucket, Key="exp/copy", CopySource={"Bucket": vbucket, "Key": "exp/a"})
    assert 'rule-id="thirty%20days"' in copied["Expiration"]
    uid = s3.create_multipart_upload(Bucket=vbucket, Key="exp/mp")["UploadId"]
    etag = s3.upload_part(Bucket=vbucket, Key="exp/mp", UploadId=uid, PartNumber=1, Body=b"z")["ETag"]
    done = s3.complete_multipart_upload(Bucket=vbucket, Key="exp/mp", UploadId=uid,
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert 'rule-id="thirty%20days"' in done["Expiration"]
    # no rule expires these: another prefix, a noncurrent version (NoncurrentDays is not reported)
    assert "Expiration" not in s3.put_object(Bucket=vbucket, Key="keep/a", Body=b"x")
    assert "Expiration" not in s3.head_object(Bucket=vbucket, Key="keep/a")
    s3.put_object(Bucket=vbucket, Key="exp/a", Body=b"y")
    assert "Expiration" not in s3.head_object(Bucket=vbucket, Key="exp/a", VersionId=put["VersionId"])


def test_x_amz_expiration_follows_a_configuration_change_in_every_worker(s3: Any, bucket: str) -> None:
    """Each gateway process re-reads the configuration behind the header within a second;
    polled (the default gateway has several workers, each with its own cache)."""
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": RULES[:1]})
    s3.put_object(Bucket=bucket, Key="logs/a", Body=b"x")
    for _ in range(8):  # whichever workers answer, all have read it by now
        assert "rule-id=\"expire-logs\"" in s3.head_object(Bucket=bucket, Key="logs/a")["Expiration"]
    s3.delete_bucket_lifecycle(Bucket=bucket)
    deadline = time.monotonic() + 10
    while any("Expiration" in s3.head_object(Bucket=bucket, Key="logs/a") for _ in range(8)):
        assert time.monotonic() < deadline, "x-amz-expiration still sent 10 s after the rules went"
        time.sleep(0.1)


def test_an_abort_rule_is_announced_on_create_multipart_upload_and_list_parts(s3: Any, bucket: str) -> None:
    """x-amz-abort-date (the midnight after initiation + DaysAfterInitiation) and
    x-amz-abort-rule-id, as S3 sends them, for an upload an abort rule selects."""
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
        {"ID": "abort-late", "Status": "Enabled", "Filter": {"Prefix": "up/"},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}},
        {"ID": "abort-soon", "Status": "Enabled", "Filter": {"Prefix": "up/soon"},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}},
    ]})
    deadline = time.monotonic() + 10  # every worker reads the rules within a second
    while "AbortDate" not in (created := s3.create_multipart_upload(Bucket=bucket, Key="up/soon/a")):
        assert time.monotonic() < deadline, "no x-amz-abort-date 10 s after the rule was set"
        time.sleep(0.1)
    [upload] = [u for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"] if u["UploadId"] == created["UploadId"]]
    assert created["AbortDate"] == _midnight_after(upload["Initiated"], 2)  # the earliest rule
    assert created["AbortRuleId"] == "abort-soon"
    parts = s3.list_parts(Bucket=bucket, Key="up/soon/a", UploadId=created["UploadId"])
    assert (parts["AbortDate"], parts["AbortRuleId"]) == (created["AbortDate"], "abort-soon")
    # no rule selects this one
    other = s3.create_multipart_upload(Bucket=bucket, Key="elsewhere")
    assert "AbortDate" not in other and "AbortRuleId" not in other
    assert "AbortDate" not in s3.list_parts(Bucket=bucket, Key="elsewhere", UploadId=other["UploadId"])
