"""Reads as HTTP caches and resuming downloaders rely on them: If-Range, malformed ranges,
entity-tag comparison, and what 304 and 204 responses carry (RFC 9110), on a real gateway."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.gateway import signed
from tests.support.procs import Service

pytestmark = pytest.mark.integration


def test_if_range_resumes_only_the_same_object(gateway: Service, s3: Any, bucket: str) -> None:
    """A client holding the first half of an object asks for the rest with If-Range: it
    gets the rest while the object is the same, the whole object once it changed. The
    Range was applied regardless: the rest of another object, spliced without a word."""
    url = f"{gateway.url}/{bucket}/resumed"
    first = s3.put_object(Bucket=bucket, Key="resumed", Body=b"AAAAAAAAAA")["ETag"]
    modified = signed("HEAD", url).headers["last-modified"]
    for validator in (first, modified):
        r = signed("GET", url, headers={"range": "bytes=5-", "if-range": validator})
        assert (r.status_code, r.content) == (206, b"AAAAA"), validator
    s3.put_object(Bucket=bucket, Key="resumed", Body=b"BBBBBBBBBB")
    an_hour_ago = format_datetime(datetime.now(UTC) - timedelta(hours=1), usegmt=True)
    for validator in (first, an_hour_ago, "W/" + first, "not a validator"):
        r = signed("GET", url, headers={"range": "bytes=5-", "if-range": validator})
        assert (r.status_code, r.content) == (200, b"BBBBBBBBBB"), validator
        assert "content-range" not in r.headers
    # an If-Range that does not hold also spares an unsatisfiable range its 416
    r = signed("GET", url, headers={"range": "bytes=50-", "if-range": first})
    assert (r.status_code, r.content) == (200, b"BBBBBBBBBB")
    current = signed("HEAD", url).headers["etag"]
    r = signed("GET", url, headers={"range": "bytes=5-", "if-range": current})
    assert (r.status_code, r.content) == (206, b"BBBBB")


@pytest.mark.parametrize("value", ["bytes=0-1_0", "bytes=+1-3", "bytes=--1", "bytes=0- 3",
                                   "bytes=4-2", "bytes=0-1,3-4", "bytes=-", "items=0-1",
                                   "bytes=0-" + "9" * 5000, "bytes=" + "1" * 5000 + "-",
                                   "bytes=-" + "9" * 5000])
def test_a_malformed_range_is_ignored(gateway: Service, s3: Any, bucket: str, value: str) -> None:
    """As S3 (RFC 9110 lets a server ignore Range): the whole object. Python's int() made
    '1_0' ten, and took '+1' and ' 3'; '--1' was a 416; 5,000 digits, which int() refuses,
    a 500."""
    s3.put_object(Bucket=bucket, Key="digits", Body=b"0123456789")
    r = signed("GET", f"{gateway.url}/{bucket}/digits", headers={"range": value})
    assert (r.status_code, r.content) == (200, b"0123456789")


@pytest.mark.parametrize("value", ["bytes=-0", "bytes=10-", "bytes=99-100"])
def test_an_unsatisfiable_range_names_the_size_and_the_range(
    gateway: Service, s3: Any, bucket: str, value: str
) -> None:
    s3.put_object(Bucket=bucket, Key="digits", Body=b"0123456789")
    r = signed("GET", f"{gateway.url}/{bucket}/digits", headers={"range": value})
    assert r.status_code == 416 and r.headers["content-range"] == "bytes */10"
    assert f"<RangeRequested>{value}</RangeRequested>" in r.text and "<ActualObjectSize>10<" in r.text


def test_304_and_204_carry_what_rfc_9110_asks(gateway: Service, s3: Any, bucket: str) -> None:
    """A 304 repeats the caching headers a cache refreshes its copy from, and neither it nor
    a 204 says Content-Length: 0 (a cache could take the object for empty)."""
    etag = s3.put_object(Bucket=bucket, Key="cached", Body=b"ten bytes!", CacheControl="max-age=60",
                         Expires=datetime(2030, 1, 1, tzinfo=UTC))["ETag"]
    r = signed("GET", f"{gateway.url}/{bucket}/cached", headers={"if-none-match": etag})
    assert r.status_code == 304 and r.content == b""
    assert "content-length" not in r.headers
    assert r.headers["etag"] == etag and r.headers["cache-control"] == "max-age=60"
    assert r.headers["expires"] == "Tue, 01 Jan 2030 00:00:00 GMT" and "last-modified" in r.headers
    r = signed("DELETE", f"{gateway.url}/{bucket}/cached")
    assert r.status_code == 204 and "content-length" not in r.headers


def test_entity_tags_compare_as_rfc_9110_says(gateway: Service, s3: Any, bucket: str) -> None:
    """If-None-Match compares weakly (a W/ tag a proxy weakened still matches: 304, not the
    whole object again); If-Match strongly, and a list is a list on writes as on reads."""
    etag = s3.put_object(Bucket=bucket, Key="e", Body=b"data")["ETag"]
    url = f"{gateway.url}/{bucket}/e"
    assert signed("GET", url, headers={"if-none-match": f'"zz", W/{etag}'}).status_code == 304
    assert signed("GET", url, headers={"if-match": f"W/{etag}"}).status_code == 412
    assert signed("GET", url, headers={"if-match": f'"zz", {etag}'}).status_code == 200
    r = signed("PUT", url, b"new", headers={"if-match": f'"zz", {etag}'})
    assert r.status_code == 200, r.text
    assert signed("PUT", url, b"newer", headers={"if-match": f"W/{r.headers['etag']}"}).status_code == 412


def test_a_response_override_latin1_cannot_carry_is_refused(gateway: Service, s3: Any, bucket: str) -> None:
    """As S3: 400 InvalidArgument naming the parameter. It was sent with '?' for each such
    character: a download named '??.txt'. Latin-1 text is sent as it is."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"body")
    value = quote('attachment; filename="日本.txt"')
    r = signed("GET", f"{gateway.url}/{bucket}/k?response-content-disposition={value}")
    assert r.status_code == 400
    assert "<Code>InvalidArgument</Code>" in r.text and "ISO-8859-1" in r.text
    assert "<ArgumentName>response-content-disposition</ArgumentName>" in r.text
    r = signed("GET", f"{gateway.url}/{bucket}/k?response-content-disposition={quote('inline; filename=é.txt')}")
    assert r.status_code == 200
    assert dict(r.headers.raw)[b"content-disposition"] == "inline; filename=é.txt".encode("latin-1")
