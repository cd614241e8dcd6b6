"""Bucket CORS over the wire: the configuration (boto3 round trips, AWS errors, the checksum
AWS requires on PUT, DELETE), then S3's application of it to raw browser-like requests
(httpx, no credentials for preflights): preflight OPTIONS answers and the Access-Control-*
headers of actual requests, path-style and virtual-hosted."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import signed
from tests.support.procs import Service


def _error(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str, str]:
    err = exc.value.response
    return err["ResponseMetadata"]["HTTPStatusCode"], err["Error"]["Code"], err["Error"]["Message"]


RULES: list[dict[str, Any]] = [
    {"ID": "app", "AllowedHeaders": ["Content-Type", "x-amz-*"], "AllowedMethods": ["GET", "PUT", "POST"],
     "AllowedOrigins": ["https://app.example.com", "http://*.example.org"],
     "ExposeHeaders": ["ETag", "x-amz-version-id"], "MaxAgeSeconds": 600},
    {"AllowedMethods": ["GET", "HEAD"], "AllowedOrigins": ["*"]},
]


def cors(s3: Any, bucket: str, rules: list[dict[str, Any]] = RULES) -> None:
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": rules})


# --------------------------------------------------------------------------------------------
# the configuration


def test_a_configuration_round_trips_through_boto3(s3: Any, bucket: str) -> None:
    cors(s3, bucket)
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == RULES


def test_get_without_a_configuration_is_no_such_cors_configuration(s3: Any, bucket: str) -> None:
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_cors(Bucket=bucket)
    assert _error(exc) == (404, "NoSuchCORSConfiguration", "The CORS configuration does not exist")
    assert exc.value.response["Error"]["BucketName"] == bucket


def test_put_replaces_and_delete_removes_the_configuration(s3: Any, bucket: str) -> None:
    cors(s3, bucket)
    cors(s3, bucket, RULES[1:])
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == RULES[1:]
    assert s3.delete_bucket_cors(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_cors(Bucket=bucket)
    assert _error(exc)[:2] == (404, "NoSuchCORSConfiguration")
    assert s3.delete_bucket_cors(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 204
    s3.head_bucket(Bucket=bucket)


@pytest.mark.parametrize(
    ("rules", "error"),
    [
        ([{"AllowedMethods": ["GET", "PATCH"], "AllowedOrigins": ["*"]}],
         (400, "InvalidRequest", "Found unsupported HTTP method in CORS config. Unsupported method is PATCH")),
        ([{"AllowedMethods": ["GET"], "AllowedOrigins": ["https://*.example.*"]}],
         (400, "InvalidRequest", 'AllowedOrigin "https://*.example.*" can not have more than one wildcard.')),
        ([{"AllowedMethods": ["GET"], "AllowedOrigins": ["*"], "AllowedHeaders": ["*-amz-*"]}],
         (400, "InvalidRequest", 'AllowedHeader "*-amz-*" can not have more than one wildcard.')),
        ([{"AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}] * 101, (400, "MalformedXML", None)),
        ([], (400, "MalformedXML", None)),
        ([{"ID": "x" * 256, "AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}], (400, "InvalidArgument", None)),
    ],
    ids=["unsupported-method", "two-origin-wildcards", "two-header-wildcards", "101-rules", "no-rules",
         "long-id"],
)
def test_an_invalid_configuration_is_refused_and_changes_nothing(
    s3: Any, bucket: str, rules: list[dict[str, Any]], error: tuple[int, str, str | None]
) -> None:
    cors(s3, bucket)
    with pytest.raises(ClientError) as exc:
        s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": rules})
    got = _error(exc)
    assert got[:2] == error[:2]
    if error[2] is not None:
        assert got[2] == error[2]
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == RULES


BODY = (b'<CORSConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><CORSRule>'
        b"<AllowedMethod>GET</AllowedMethod><AllowedOrigin>*</AllowedOrigin></CORSRule></CORSConfiguration>")


def test_put_needs_content_md5_or_a_checksum_and_verifies_it(gateway: Service, s3: Any, bucket: str) -> None:
    response = signed("PUT", f"{gateway.url}/{bucket}?cors", BODY)
    assert response.status_code == 400
    assert b"<Code>InvalidRequest</Code>" in response.content
    assert b"Content-MD5 OR x-amz-checksum-*" in response.content
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    response = signed("PUT", f"{gateway.url}/{bucket}?cors", BODY, {"Content-MD5": wrong})
    assert response.status_code == 400 and b"BadDigest" in response.content
    with pytest.raises(ClientError):
        s3.get_bucket_cors(Bucket=bucket)
    md5 = base64.b64encode(hashlib.md5(BODY).digest()).decode()
    response = signed("PUT", f"{gateway.url}/{bucket}?cors", BODY, {"Content-MD5": md5})
    assert response.status_code == 200, response.content
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == [{"AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}]


def test_another_users_bucket_is_access_denied(alice: Any, s3: Any, bucket: str) -> None:
    cors(s3, bucket)
    for call in (
        lambda: alice.get_bucket_cors(Bucket=bucket),
        lambda: alice.delete_bucket_cors(Bucket=bucket),
        lambda: alice.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES[1:]}),
    ):
        with pytest.raises(ClientError) as exc:
            call()
        assert _error(exc)[:2] == (403, "AccessDenied")
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == RULES
