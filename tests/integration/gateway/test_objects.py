from __future__ import annotations

import base64
import hashlib
import io
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import botocore.exceptions
import pytest
from boto3.s3.transfer import TransferConfig

from tests.support.gateway import signed
from tests.support.procs import Service

pytestmark = pytest.mark.integration
MiB = 1024 * 1024


def err(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> tuple[str, int]:
    r = exc.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def test_put_get_head_round_trip(s3: Any, bucket: str) -> None:
    body = b"hello world"
    r = s3.put_object(Bucket=bucket, Key="dir/hello world+é.txt", Body=body, ContentType="text/plain",
                      Metadata={"color": "blue"}, CacheControl="max-age=60")
    assert r["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    assert r["ChecksumCRC32"] == base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    assert r["ChecksumType"] == "FULL_OBJECT"  # PutObjectOutput's, as S3 answers
    g = s3.get_object(Bucket=bucket, Key="dir/hello world+é.txt")
    assert g["Body"].read() == body
    assert g["ContentType"] == "text/plain"
    assert g["Metadata"] == {"color": "blue"}
    assert g["CacheControl"] == "max-age=60"
    h = s3.head_object(Bucket=bucket, Key="dir/hello world+é.txt")
    assert h["ContentLength"] == len(body) and h["ETag"] == r["ETag"]


def test_empty_object(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert s3.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""
    assert s3.head_object(Bucket=bucket, Key="empty")["ContentLength"] == 0


@pytest.mark.parametrize("rng,expected", [
    ("bytes=0-4", b"01234"), ("bytes=5-", b"56789"), ("bytes=-3", b"789"), ("bytes=8-100", b"89"),
])
def test_ranges(s3: Any, bucket: str, rng: str, expected: bytes) -> None:
    s3.put_object(Bucket=bucket, Key="digits", Body=b"0123456789")
    g = s3.get_object(Bucket=bucket, Key="digits", Range=rng)
    assert g["Body"].read() == expected
    assert g["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert g["ContentRange"].endswith("/10")


def test_unsatisfiable_range(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="digits", Body=b"0123456789")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="digits", Range="bytes=20-30")
    assert err(exc) == ("InvalidRange", 416)


def test_conditionals(s3: Any, bucket: str) -> None:
    etag = s3.put_object(Bucket=bucket, Key="c", Body=b"data")["ETag"]
    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=etag)["Body"].read() == b"data"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="c", IfMatch='"nope"')
    assert err(exc)[1] == 412
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert err(exc)[1] == 304
    future = datetime.now(UTC) + timedelta(hours=1)
    past = datetime.now(UTC) - timedelta(hours=1)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=future)
    assert err(exc)[1] == 304
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="c", IfUnmodifiedSince=past)
    assert err(exc)[1] == 412
    # conditional writes are checked atomically with the write
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket=bucket, Key="c", Body=b"other", IfNoneMatch="*")
    assert err(exc)[1] == 412
    assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == b"data"
    s3.put_object(Bucket=bucket, Key="fresh", Body=b"new", IfNoneMatch="*")


def test_checksum_mode_and_algorithms(s3: Any, bucket: str) -> None:
    body = b"checksum me" * 100
    for alg in ("CRC32", "CRC32C", "SHA1", "SHA256", "CRC64NVME"):
        r = s3.put_object(Bucket=bucket, Key=f"cs-{alg}", Body=body, ChecksumAlgorithm=alg)
        assert r[f"Checksum{alg}"]
        g = s3.get_object(Bucket=bucket, Key=f"cs-{alg}", ChecksumMode="ENABLED")
        assert g["Body"].read() == body  # botocore verifies the returned checksum
        assert g[f"Checksum{alg}"] == r[f"Checksum{alg}"]


def test_a_copy_gets_the_checksum_algorithm_it_asks_for(s3: Any, bucket: str) -> None:
    """CopyObject with x-amz-checksum-algorithm computes that checksum of the copy (how S3
    changes an object's algorithm, in place too); it kept the source's, or none. An
    unknown algorithm is refused and copies nothing."""
    body = b"copy my checksum" * 1000
    s3.put_object(Bucket=bucket, Key="src", Body=body, ChecksumAlgorithm="CRC32")
    expected = base64.b64encode(hashlib.sha256(body).digest()).decode()
    r = s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"},
                       ChecksumAlgorithm="SHA256")
    assert r["CopyObjectResult"]["ChecksumSHA256"] == expected
    head = s3.head_object(Bucket=bucket, Key="dst", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == expected and "ChecksumCRC32" not in head
    # in place: the same object with another algorithm
    s3.copy_object(Bucket=bucket, Key="src", CopySource={"Bucket": bucket, "Key": "src"},
                   ChecksumAlgorithm="CRC64NVME")
    g = s3.get_object(Bucket=bucket, Key="src", ChecksumMode="ENABLED")
    assert g["Body"].read() == body and g["ChecksumCRC64NVME"]  # botocore verified it
    r = signed("PUT", f"{s3.meta.endpoint_url}/{bucket}/nope",
               headers={"x-amz-copy-source": f"/{bucket}/src", "x-amz-checksum-algorithm": "NOPE"})
    assert r.status_code == 400 and "<Code>InvalidRequest</Code>" in r.text
    assert "nope" not in [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]


def test_bad_content_md5_is_refused_and_changes_nothing(s3: Any, bucket: str) -> None:
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket=bucket, Key="md5", Body=b"data", ContentMD5=wrong)
    assert err(exc) == ("BadDigest", 400)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.head_object(Bucket=bucket, Key="md5")
    assert err(exc)[1] == 404


def test_missing_key_and_bucket(s3: Any, bucket: str) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="nope")
    assert err(exc) == ("NoSuchKey", 404)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket="no-such-bucket-x", Key="k", Body=b"")
    assert err(exc) == ("NoSuchBucket", 404)


def test_tagging(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="a=1&b=two")
    assert s3.head_object(Bucket=bucket, Key="t")["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "2"
    tags = {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]}
    assert tags == {"a": "1", "b": "two"}
    s3.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": [{"Key": "c", "Value": "3"}]})
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == [{"Key": "c", "Value": "3"}]
    s3.delete_object_tagging(Bucket=bucket, Key="t")
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(11)]})
    assert err(exc)[0] == "BadRequest"  # AWS's code (and words) for more than 10
    assert exc.value.response["Error"]["Message"] == "Object tags cannot be greater than 10"
    # the x-amz-tagging header of a write is held to the same rules as a Tagging document
    eleven = "&".join(f"k{i}=v" for i in range(11))
    for header, code in ((eleven, "BadRequest"), ("a=1&a=2", "InvalidTag"), ("a=%01", "InvalidTag")):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.put_object(Bucket=bucket, Key="header-tags", Body=b"x", Tagging=header)
        assert err(exc)[0] == code, header
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.create_multipart_upload(Bucket=bucket, Key="header-tags", Tagging=header)
        assert err(exc)[0] == code, header
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["t"]
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")
    # a bucket takes up to 50
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(50)]})
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(51)]})
    assert err(exc)[0] == "InvalidTag"


def test_header_tags_and_content_encoding_as_sent(s3: Any, bucket: str) -> None:
    """A tag name alone in x-amz-tagging is a tag with an empty value; Content-Encoding keeps
    its form once the aws-chunked framing botocore adds to it for a trailing checksum is gone."""
    s3.put_object(Bucket=bucket, Key="e", Body=b"x" * 100, Tagging="foo=bar&bar",
                  ContentEncoding="deflate, gzip", ChecksumAlgorithm="CRC32")
    tags = s3.get_object_tagging(Bucket=bucket, Key="e")["TagSet"]
    assert sorted((t["Key"], t["Value"]) for t in tags) == [("bar", ""), ("foo", "bar")]
    assert s3.head_object(Bucket=bucket, Key="e")["ContentEncoding"] == "deflate, gzip"


def test_copy_object(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"copy me", Metadata={"m": "1"}, Tagging="t=1")
    r = s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert r["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(b"copy me").hexdigest()}"'
    g = s3.get_object(Bucket=bucket, Key="dst")
    assert g["Body"].read() == b"copy me" and g["Metadata"] == {"m": "1"}
    s3.copy_object(Bucket=bucket, Key="dst2", CopySource=f"{bucket}/src", MetadataDirective="REPLACE",
                   Metadata={"n": "2"}, ContentType="text/x")
    h = s3.head_object(Bucket=bucket, Key="dst2")
    assert h["Metadata"] == {"n": "2"} and h["ContentType"] == "text/x"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.copy_object(Bucket=bucket, Key="src", CopySource={"Bucket": bucket, "Key": "src"})
    assert err(exc)[0] == "InvalidRequest"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.copy_object(Bucket=bucket, Key="x", CopySource={"Bucket": bucket, "Key": "missing"})
    assert err(exc)[0] == "NoSuchKey"


def test_a_copy_has_the_website_redirect_the_request_gives(s3: Any, bucket: str) -> None:
    """As S3: the redirect is 'unique to each object and is not copied'; the copy request
    sets it, and a copy onto itself that changes only it is legal. The source's was copied
    and the request's ignored, and that self-copy was refused."""
    s3.put_object(Bucket=bucket, Key="page", Body=b"<html/>", WebsiteRedirectLocation="/old")
    s3.copy_object(Bucket=bucket, Key="plain", CopySource={"Bucket": bucket, "Key": "page"})
    assert "WebsiteRedirectLocation" not in s3.head_object(Bucket=bucket, Key="plain")
    s3.copy_object(Bucket=bucket, Key="moved", CopySource={"Bucket": bucket, "Key": "page"},
                   WebsiteRedirectLocation="/new")
    assert s3.head_object(Bucket=bucket, Key="moved")["WebsiteRedirectLocation"] == "/new"
    s3.copy_object(Bucket=bucket, Key="page", CopySource={"Bucket": bucket, "Key": "page"},
                   WebsiteRedirectLocation="/newer")
    head = s3.head_object(Bucket=bucket, Key="page")
    assert head["WebsiteRedirectLocation"] == "/newer" and head["ContentLength"] == 7


def test_delete_objects(s3: Any, bucket: str) -> None:
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"d/{i}", Body=b"x")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"d/{i}"} for i in range(3)] + [{"Key": "d/missing"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["d/0", "d/1", "d/2", "d/missing"]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["d/3", "d/4"]
    q = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "d/3"}], "Quiet": True})
    assert "Deleted" not in q


def test_listing_v1_v2_pagination_and_encoding(s3: Any, bucket: str) -> None:
    keys = sorted([f"a/{i:03d}" for i in range(25)] + ["b/x y", "b/plus+sign", "c", "é/unicode"])
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=b"")
    seen: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 7}):
        seen += [o["Key"] for o in page.get("Contents", [])]
    assert seen == sorted(keys, key=lambda k: k.encode())
    seen = []
    for page in s3.get_paginator("list_objects").paginate(Bucket=bucket, PaginationConfig={"PageSize": 6}):
        seen += [o["Key"] for o in page.get("Contents", [])]
    assert seen == sorted(keys, key=lambda k: k.encode())
    top = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["a/", "b/", "é/"]
    assert [o["Key"] for o in top["Contents"]] == ["c"]
    b = s3.list_objects_v2(Bucket=bucket, Prefix="b/")
    assert sorted(o["Key"] for o in b["Contents"]) == ["b/plus+sign", "b/x y"]
    start = s3.list_objects_v2(Bucket=bucket, StartAfter="a/020", MaxKeys=3)
    assert [o["Key"] for o in start["Contents"]] == ["a/021", "a/022", "a/023"]


def test_large_object_streams(s3: Any, bucket: str) -> None:
    data = hashlib.sha256(b"seed").digest() * (12 * MiB // 32)
    cfg = TransferConfig(multipart_threshold=64 * MiB)
    s3.upload_fileobj(io.BytesIO(data), bucket, "large", Config=cfg)
    out = io.BytesIO()
    s3.download_fileobj(bucket, "large", out, Config=TransferConfig(multipart_threshold=64 * MiB))
    assert out.getvalue() == data
    part = s3.get_object(Bucket=bucket, Key="large", Range=f"bytes={5 * MiB - 3}-{5 * MiB + 2}")["Body"].read()
    assert part == data[5 * MiB - 3: 5 * MiB + 3]


@pytest.mark.parametrize("upload_part", [False, True])
def test_an_upload_without_a_length_is_411(gateway: Any, s3: Any, bucket: str, upload_part: bool) -> None:
    """No Content-Length and no chunked body: HTTP reads that as empty, which is rarely what
    was meant; AWS answers MissingContentLength and so do we, storing nothing."""
    import socket
    from urllib.parse import urlsplit

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.support.gateway import ROOT_AK, ROOT_SK

    url = f"{gateway.url}/{bucket}/nolength"
    if upload_part:
        uid = s3.create_multipart_upload(Bucket=bucket, Key="nolength")["UploadId"]
        url += f"?partNumber=1&uploadId={uid}"
    req = AWSRequest(method="PUT", url=url, data=b"")
    S3SigV4Auth(Credentials(ROOT_AK, ROOT_SK), "s3", "us-east-1").add_auth(req)
    parts = urlsplit(url)
    lines = [f"PUT {parts.path}{'?' + parts.query if parts.query else ''} HTTP/1.1", f"Host: {parts.netloc}"]
    lines += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() not in ("content-length", "host")]
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 411 ") and b"<Code>MissingContentLength</Code>" in answer
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    if upload_part:
        assert not s3.list_parts(Bucket=bucket, Key="nolength", UploadId=uid).get("Parts")


@pytest.mark.parametrize("value", ["a%0D%0AX-Injected%3A%201", "nul%00", "tab%09ok"])
def test_a_response_override_that_cannot_be_a_header_is_invalid_argument(
    gateway: Service, s3: Any, bucket: str, value: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"body")
    for param in ("response-content-disposition", "response-content-type", "response-expires"):
        for method in ("GET", "HEAD"):
            r = signed(method, f"{gateway.url}/{bucket}/k?{param}={value}")
            if value == "tab%09ok":  # a tab may be in a header value
                assert r.status_code == 200 and "\t" in r.headers[param[len("response-"):]], r.headers
                continue
            assert r.status_code == 400, (param, method, r.status_code, r.text)
            if method == "GET":
                assert b"<Code>InvalidArgument</Code>" in r.content and param.encode() in r.content


@pytest.mark.parametrize("escape", ["%FF", "%C3%28", "%ED%A0%80"])
def test_a_key_that_is_not_utf8_is_refused_as_aws_does(
    gateway: Any, s3: Any, bucket: str, escape: str,
) -> None:
    """Percent-escapes that decode to no UTF-8: 400 InvalidURI for every operation, before
    a body is read. They were a 500 with a traceback (which clients retry) once the
    metadata store refused the key, after a PUT's whole body was received."""
    url = f"{gateway.url}/{bucket}/bad{escape}key"
    for method, query, body in [("PUT", "", b"x" * 200_000), ("GET", "", b""), ("HEAD", "", b""),
                                ("DELETE", "", b""), ("POST", "?uploads", b"")]:
        resp = signed(method, url + query, body)
        assert resp.status_code == 400, (method, resp.status_code, resp.text)
        if method != "HEAD":
            assert "<Code>InvalidURI</Code>" in resp.text, resp.text
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    assert not any("Traceback" in line for line in gateway.output)


def test_a_listing_says_the_time_the_last_modified_header_says(s3: Any, bucket: str) -> None:
    """Whole seconds, as S3 lists them: with the milliseconds crossbeat stores, a tool that
    set a file's time from the header and compared it with the listing's (`aws s3 sync
    --exact-timestamps`) found every object changed and downloaded it again on every run."""
    for i in range(5):  # (one could fall on .000 by chance; five will not)
        s3.put_object(Bucket=bucket, Key=f"t{i}", Body=b"x")
    listed = {o["Key"]: o["LastModified"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    for key, when in listed.items():
        assert when == s3.head_object(Bucket=bucket, Key=key)["LastModified"], key
    versions = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert all(v["LastModified"].microsecond == 0 for v in versions)
