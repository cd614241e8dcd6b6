"""Bucket CORS over the wire: the configuration (boto3 round trips, AWS errors, the checksum
AWS requires on PUT, DELETE), then S3's application of it to raw browser-like requests
(httpx, no credentials for preflights): preflight OPTIONS answers and the Access-Control-*
headers of actual requests, path-style and virtual-hosted."""

from __future__ import annotations

import base64
import hashlib
import time
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import urlsplit

import httpx
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


# --------------------------------------------------------------------------------------------
# preflights: OPTIONS without credentials

APP = "https://app.example.com"
VARY = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"
NOT_ALLOWED = (
    "CORSResponse: This CORS request is not allowed. This is usually because the evalution of"
    " Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers"
    " are not whitelisted by the resource's CORS spec."
)


def options(url: str, origin: str | None = None, method: str | None = None, headers: str | None = None,
            host: str | None = None) -> httpx.Response:
    sent = {"Origin": origin, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": headers, "Host": host}
    return httpx.options(url, headers={k: v for k, v in sent.items() if v is not None}, timeout=30)


def cors_headers(r: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in r.headers.items() if k.startswith("access-control-") or k == "vary"}


def forbidden(r: httpx.Response) -> tuple[int, str, str, str, str]:
    root = ET.fromstring(r.content)
    return (r.status_code, root.findtext("Code") or "", root.findtext("Message") or "",
            root.findtext("Method") or "", root.findtext("ResourceType") or "")


def test_a_preflight_from_an_allowed_origin_gets_the_rules_headers(gateway: Service, s3: Any, bucket: str) -> None:
    cors(s3, bucket)
    r = options(f"{gateway.url}/{bucket}/photos/a.jpg", APP, "PUT", "Content-Type,X-Amz-Date")
    assert r.status_code == 200 and r.content == b""
    assert cors_headers(r) == {
        "access-control-allow-origin": APP,
        "access-control-allow-credentials": "true",
        "access-control-allow-methods": "GET, PUT, POST",
        "access-control-allow-headers": "content-type, x-amz-date",
        "access-control-expose-headers": "ETag, x-amz-version-id",
        "access-control-max-age": "600",
        "vary": VARY,
    }
    # a wildcard origin pattern echoes the origin too; the bucket itself can be asked for
    r = options(f"{gateway.url}/{bucket}", "http://uploads.example.org", "POST")
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "http://uploads.example.org"
    assert "access-control-allow-headers" not in r.headers  # none requested


def test_an_any_origin_rule_answers_a_star_without_credentials(gateway: Service, s3: Any, bucket: str) -> None:
    cors(s3, bucket)
    r = options(f"{gateway.url}/{bucket}/k", "https://anyone.test", "HEAD")
    assert r.status_code == 200
    assert cors_headers(r) == {"access-control-allow-origin": "*", "access-control-allow-methods": "GET, HEAD",
                               "vary": VARY}


@pytest.mark.parametrize(
    ("origin", "method", "headers"),
    [
        ("https://app.example.com.evil.test", "PUT", None),  # origin: no rule allows PUT from it
        ("http://app.example.com", "PUT", None),  # another scheme is another origin
        ("https://example.org", "POST", None),  # `http://*.example.org` needs the `.`
        (APP, "DELETE", None),  # method
        (APP, "PUT", "content-type,authorization"),  # one header no AllowedHeader covers
        ("https://anyone.test", "GET", "content-type"),  # the `*` rule allows no header
    ],
    ids=["origin", "scheme", "origin-pattern", "method", "header", "no-allowed-headers"],
)
def test_a_preflight_no_rule_allows_is_access_forbidden(
    gateway: Service, s3: Any, bucket: str, origin: str, method: str, headers: str | None
) -> None:
    cors(s3, bucket)
    r = options(f"{gateway.url}/{bucket}/k", origin, method, headers)
    assert forbidden(r) == (403, "AccessForbidden", NOT_ALLOWED, method, "OBJECT")
    assert cors_headers(r) == {}
    assert forbidden(options(f"{gateway.url}/{bucket}", origin, method, headers))[4] == "BUCKET"


def test_a_preflight_to_a_bucket_without_rules_or_without_a_bucket_is_forbidden(
    gateway: Service, bucket: str
) -> None:
    r = options(f"{gateway.url}/{bucket}/k", APP, "GET")
    assert forbidden(r) == (403, "AccessForbidden", "CORSResponse: CORS is not enabled for this bucket.",
                            "GET", "BUCKET")
    assert forbidden(options(f"{gateway.url}/{bucket}/k", APP))[3] == "OPTIONS"
    r = options(f"{gateway.url}/no-such-bucket-for-cors/k", APP, "GET")
    assert forbidden(r)[:3] == (403, "AccessForbidden", "CORSResponse: Bucket not found")


def test_a_preflight_without_origin_or_method_is_a_bad_request(gateway: Service, s3: Any, bucket: str) -> None:
    cors(s3, bucket)
    r = options(f"{gateway.url}/{bucket}/k", method="GET")
    assert r.status_code == 400
    assert forbidden(r)[1:3] == ("BadRequest", "Insufficient information. Origin request header needed.")
    r = options(f"{gateway.url}/{bucket}/k", APP)
    assert r.status_code == 400
    assert forbidden(r)[1:3] == ("BadRequest", "Invalid Access-Control-Request-Method: null")


def test_a_virtual_hosted_preflight_names_the_bucket_in_the_host(gateway: Service, s3: Any, bucket: str) -> None:
    cors(s3, bucket)
    host = f"{bucket}.localhost:{urlsplit(gateway.url).port}"
    r = options(f"{gateway.url}/photos/a.jpg", APP, "PUT", host=host)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP
    assert forbidden(options(f"{gateway.url}/photos/a.jpg", APP, "DELETE", host=host))[0] == 403


def test_deleting_the_rules_ends_preflights_in_every_worker(gateway: Service, s3: Any, bucket: str) -> None:
    """Each gateway process re-reads the rules within CORS_TTL_S; polled (the default
    gateway has several workers, each with its own cache), without sleeping."""
    cors(s3, bucket)
    for _ in range(8):  # whichever workers answer, all have read the rules by now
        assert options(f"{gateway.url}/{bucket}/k", APP, "GET").status_code == 200
    s3.delete_bucket_cors(Bucket=bucket)
    deadline = time.monotonic() + 10
    while True:
        answers = [options(f"{gateway.url}/{bucket}/k", APP, "GET") for _ in range(8)]
        if all(r.status_code == 403 for r in answers):
            break
        assert time.monotonic() < deadline, "preflights still allowed 10 s after the rules went"
    # the message of one of those refusals: a ninth preflight may reach a worker that none of
    # the eight did, whose cache may still hold the rules (the kernel does not deal
    # connections to workers in turn)
    assert forbidden(answers[-1])[2] == "CORSResponse: CORS is not enabled for this bucket."


# --------------------------------------------------------------------------------------------
# actual requests


def test_actual_requests_carry_the_headers_only_for_a_matching_origin(
    gateway: Service, s3: Any, bucket: str
) -> None:
    cors(s3, bucket)
    url = f"{gateway.url}/{bucket}/doc.txt"
    put = signed("PUT", url, b"hello", {"Origin": APP})
    assert put.status_code == 200
    assert cors_headers(put) == {
        "access-control-allow-origin": APP, "access-control-allow-credentials": "true",
        "access-control-allow-methods": "GET, PUT, POST",
        "access-control-expose-headers": "ETag, x-amz-version-id", "access-control-max-age": "600",
        "vary": VARY,
    }
    get = signed("GET", url, headers={"Origin": APP})
    assert get.content == b"hello" and get.headers["access-control-allow-origin"] == APP
    # the `*` rule answers GET from anyone, not PUT (which is served all the same)
    assert signed("GET", url, headers={"Origin": "https://anyone.test"}).headers[
        "access-control-allow-origin"] == "*"
    other = signed("PUT", url, b"again", {"Origin": "https://anyone.test"})
    assert other.status_code == 200 and cors_headers(other) == {}
    assert s3.get_object(Bucket=bucket, Key="doc.txt")["Body"].read() == b"again"
    # Access-Control-Request-Method, when sent, decides in place of the method, as on S3
    assert cors_headers(signed("GET", url, headers={"Origin": APP, "Access-Control-Request-Method": "DELETE"})) == {}


def test_no_origin_no_cors_headers(gateway: Service, s3: Any, bucket: str) -> None:
    cors(s3, bucket)
    url = f"{gateway.url}/{bucket}/doc.txt"
    assert cors_headers(signed("PUT", url, b"hello")) == {}
    assert cors_headers(signed("GET", url)) == {}
    assert cors_headers(httpx.get(url)) == {}  # an error answer neither


def test_error_answers_carry_the_headers_too(gateway: Service, s3: Any, bucket: str) -> None:
    cors(s3, bucket)
    missing = signed("GET", f"{gateway.url}/{bucket}/missing", headers={"Origin": APP})
    assert missing.status_code == 404 and missing.headers["access-control-allow-origin"] == APP
    anonymous = httpx.get(f"{gateway.url}/{bucket}/missing", headers={"Origin": APP})
    assert anonymous.status_code == 403 and anonymous.headers["access-control-allow-origin"] == APP


def test_a_bucket_without_rules_sends_no_cors_headers(gateway: Service, bucket: str) -> None:
    r = signed("PUT", f"{gateway.url}/{bucket}/k", b"x", {"Origin": APP})
    assert r.status_code == 200 and cors_headers(r) == {}


def test_post_object_answers_carry_the_headers_for_a_matching_origin(
    gateway: Service, s3: Any, bucket: str
) -> None:
    cors(s3, bucket)
    for origin, expected in ((APP, APP), ("https://anyone.test", None)):
        presigned = s3.generate_presigned_post(bucket, "form.txt", ExpiresIn=600)
        r = httpx.post(presigned["url"], data=presigned["fields"], files={"file": ("a.txt", b"from a form")},
                       headers={"Origin": origin}, timeout=30)
        assert r.status_code == 204, r.text
        assert r.headers.get("access-control-allow-origin") == expected
    assert s3.get_object(Bucket=bucket, Key="form.txt")["Body"].read() == b"from a form"
