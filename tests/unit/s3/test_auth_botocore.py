"""authenticate() against requests signed live by boto3/botocore at a fixed time.

A `before-send` hook captures what boto3 would put on the wire and answers it locally, so no
network is used. Covers SigV4 headers (http: hex payload; https: aws-chunked trailer),
presigned SigV4 and SigV2 URLs, and SigV2 header auth (plus one request signed by s3cmd's
SigV2 signer, in process).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.auth
import botocore.crt.auth
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossbeat.s3.auth import AuthContext, Principal, authenticate
from crossbeat.s3.body import BodyDecoder
from crossbeat.s3.errors import S3Error

NOW = datetime(2026, 11, 22, 1, 40, 18, tzinfo=UTC)
KEY = Principal("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "boto3")
ODD_KEY = "dir/a b+c~d!e(f)*g'h=i&j?k;l,m$n@o:p ü/漢字%2F.txt"


@dataclass
class Wire:
    method: str
    raw_path: bytes
    query_string: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header_dict(self) -> dict[str, str]:
        return {k.decode().lower(): v.decode("latin-1") for k, v in self.headers}


class _Raw:
    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data.read()

    def read(self, *args: Any) -> bytes:
        return self._data.read(*args)


@pytest.fixture
def fixed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    def fixed(remove_tzinfo: bool = True) -> datetime:
        return NOW.replace(tzinfo=None) if remove_tzinfo else NOW

    # botocore signs with awscrt's signers when awscrt is installed (as here): patch both
    monkeypatch.setattr(botocore.auth, "get_current_datetime", fixed)
    monkeypatch.setattr(botocore.crt.auth, "get_current_datetime", fixed)
    ts = NOW.timestamp()
    monkeypatch.setattr(
        botocore.auth.HmacV1QueryAuth, "_get_date", lambda self: str(int(ts + int(self._expires)))
    )
    monkeypatch.setattr(
        botocore.auth.HmacV1Auth, "_get_date", lambda self: formatdate(ts, usegmt=True)
    )


def client(
    scheme: str = "http", signature_version: str | None = None, region: str = "us-east-1"
) -> Any:
    cfg = Config(signature_version=signature_version) if signature_version else Config()
    return boto3.client(
        "s3",
        endpoint_url=f"{scheme}://127.0.0.1:9000",
        region_name=region,
        aws_access_key_id=KEY.access_key,
        aws_secret_access_key=KEY.secret_key,
        config=cfg,
    )


def capture(c: Any, op: str, **params: Any) -> Wire:
    """Run one client call; return the request it would have sent."""
    seen: list[Wire] = []

    def before_send(request: Any, **_: Any) -> AWSResponse:
        body = request.body
        if hasattr(body, "read"):
            body = body.read()
        if isinstance(body, str):
            body = body.encode()
        url = urlsplit(request.url)
        headers = [
            (k.encode(), v if isinstance(v, bytes) else v.encode())
            for k, v in request.headers.items()
        ]
        if not any(k.lower() == b"host" for k, _ in headers):
            headers.insert(0, (b"host", url.netloc.encode()))
        seen.append(
            Wire(request.method, url.path.encode(), url.query.encode(), headers, body or b"")
        )
        return AWSResponse(request.url, 200, {}, _Raw(b""))

    c.meta.events.register("before-send.s3.*", before_send)
    getattr(c, op)(**params)
    return seen[0]


def presigned(url: str, method: str = "GET") -> Wire:
    u = urlsplit(url)
    return Wire(method, u.path.encode(), u.query.encode(), [(b"host", u.netloc.encode())], b"")


def check(w: Wire, now: datetime = NOW) -> AuthContext:
    return authenticate(
        w.method,
        w.raw_path,
        w.query_string,
        w.headers,
        lambda ak: KEY if ak == KEY.access_key else None,
        now=now,
    )


def code(w: Wire, now: datetime = NOW) -> str:
    with pytest.raises(S3Error) as e:
        check(w, now)
    return e.value.code


def body_of(ctx: AuthContext, w: Wire) -> bytes:
    d = BodyDecoder(ctx, w.header_dict())
    out = d.feed(w.body)
    d.finish()
    return out


@pytest.mark.usefixtures("fixed_time")
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_put_object_sigv4(scheme: str) -> None:
    data = b"some data " * 1000
    w = capture(
        client(scheme), "put_object", Bucket="bucket", Key=ODD_KEY, Body=data, Metadata={"m": "v"}
    )
    ctx = check(w)
    assert ctx.payload_mode == ("hex" if scheme == "http" else "streaming-unsigned-trailer")
    assert body_of(ctx, w) == data
    assert code(w, NOW + timedelta(minutes=20)) == "RequestTimeTooSkewed"


@pytest.mark.usefixtures("fixed_time")
@pytest.mark.parametrize(
    ("op", "params"),
    [
        (
            "list_objects_v2",
            {"Bucket": "bucket", "Prefix": "a b/ü", "Delimiter": "/", "EncodingType": "url"},
        ),
        ("list_object_versions", {"Bucket": "bucket", "KeyMarker": "k+1"}),
        (
            "get_object",
            {"Bucket": "bucket", "Key": ODD_KEY, "VersionId": "v1/2=3", "Range": "bytes=0-1"},
        ),
        ("delete_objects", {"Bucket": "bucket", "Delete": {"Objects": [{"Key": "a"}]}}),
        (
            "create_multipart_upload",
            {"Bucket": "bucket", "Key": ODD_KEY, "ChecksumAlgorithm": "CRC32"},
        ),
    ],
)
def test_other_calls_sigv4(op: str, params: dict[str, Any]) -> None:
    for region in ("us-east-1", "eu-west-3"):
        w = capture(client(region=region), op, **params)
        ctx = check(w)
        assert ctx.region == region
        body_of(ctx, w)
        moved = Wire(w.method, w.raw_path + b"x", w.query_string, w.headers, w.body)
        assert code(moved) == "SignatureDoesNotMatch"


@pytest.mark.usefixtures("fixed_time")
@pytest.mark.parametrize("region", ["us-east-1", "eu-west-3"])
def test_presigned_v4(region: str) -> None:
    c = client(signature_version="s3v4", region=region)
    url = c.generate_presigned_url(
        "get_object", Params={"Bucket": "bucket", "Key": ODD_KEY}, ExpiresIn=600
    )
    w = presigned(url)
    assert b"X-Amz-Signature=" in w.query_string
    ctx = check(w)
    assert ctx.auth_type == "v4-query" and ctx.payload_mode == "unsigned"
    check(w, NOW + timedelta(seconds=599))
    assert code(w, NOW + timedelta(seconds=601)) == "AccessDenied"  # expired
    assert code(w, NOW - timedelta(minutes=20)) == "AccessDenied"  # not yet valid
    assert code(Wire("PUT", w.raw_path, w.query_string, w.headers, b"")) == "SignatureDoesNotMatch"
    assert (
        code(Wire("GET", w.raw_path + b"x", w.query_string, w.headers, b""))
        == "SignatureDoesNotMatch"
    )
    longer = w.query_string.replace(b"X-Amz-Expires=600", b"X-Amz-Expires=6000")
    assert code(Wire("GET", w.raw_path, longer, w.headers, b"")) == "SignatureDoesNotMatch"
    other_host = [(b"host", b"evil:1")]
    assert code(Wire("GET", w.raw_path, w.query_string, other_host, b"")) == "SignatureDoesNotMatch"


@pytest.mark.usefixtures("fixed_time")
def test_presigned_v4_put() -> None:
    c = client(signature_version="s3v4")
    url = c.generate_presigned_url(
        "put_object", Params={"Bucket": "bucket", "Key": "k"}, ExpiresIn=60
    )
    w = presigned(url, "PUT")
    ctx = check(w)
    d = BodyDecoder(ctx, {"content-length": "3"})
    assert d.feed(b"abc") == b"abc"
    d.finish()


@pytest.mark.usefixtures("fixed_time")
def test_presigned_v4_refuses_x_amz_headers_it_does_not_sign() -> None:
    """The holder of a presigned PUT added an unsigned x-amz-copy-source and the PUT became
    a CopyObject of any object the signer could read (x-amz-meta-*, tagging, the metadata
    directive were taken too). AWS: AccessDenied, HeadersNotSigned."""
    c = client(signature_version="s3v4")
    url = c.generate_presigned_url("put_object", Params={"Bucket": "bucket", "Key": "slot"},
                                   ExpiresIn=60)
    w = presigned(url, "PUT")
    for name, value in [(b"x-amz-copy-source", b"/private/payroll.csv"),
                        (b"x-amz-meta-owner", b"mallory"), (b"x-amz-tagging", b"a=b"),
                        (b"x-amz-metadata-directive", b"REPLACE")]:
        with pytest.raises(S3Error) as e:
            check(Wire("PUT", w.raw_path, w.query_string, [*w.headers, (name, value)], b""))
        assert e.value.code == "AccessDenied"
        assert e.value.extra["HeadersNotSigned"] == name.decode()
    # a header the URL signs (boto3 lists x-amz-meta-* in X-Amz-SignedHeaders) is accepted
    url = c.generate_presigned_url(
        "put_object", Params={"Bucket": "bucket", "Key": "slot", "Metadata": {"a": "b"}}, ExpiresIn=60)
    w = presigned(url, "PUT")
    check(Wire("PUT", w.raw_path, w.query_string, [*w.headers, (b"x-amz-meta-a", b"b")], b""))


@pytest.mark.usefixtures("fixed_time")
def test_a_session_token_is_refused_as_no_token_is_valid_here() -> None:
    """Session credentials are not issued here; the token was ignored, which told a client
    using temporary credentials that its token was fine."""
    c = boto3.client("s3", endpoint_url="http://127.0.0.1:9000", region_name="us-east-1",
                     aws_access_key_id=KEY.access_key, aws_secret_access_key=KEY.secret_key,
                     aws_session_token="FwoGZXIvYXdzEXAMPLETOKEN",
                     config=Config(signature_version="s3v4"))
    assert code(capture(c, "get_object", Bucket="bucket", Key="k")) == "InvalidToken"
    url = c.generate_presigned_url("get_object", Params={"Bucket": "bucket", "Key": "k"}, ExpiresIn=60)
    assert b"X-Amz-Security-Token=" in presigned(url).query_string
    assert code(presigned(url)) == "InvalidToken"


def test_presigned_v4_expires_limit() -> None:
    w = Wire(
        "GET",
        b"/bucket/k",
        b"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20261122%2Fus-east-1%2Fs3%2Faws4_request"
        b"&X-Amz-Date=20261122T014018Z&X-Amz-Expires=604801&X-Amz-SignedHeaders=host&X-Amz-Signature=00",
        [(b"host", b"h")],
        b"",
    )
    assert code(w) == "AuthorizationQueryParametersError"


@pytest.mark.parametrize(
    ("expires", "message"),
    [
        (b"604801", "X-Amz-Expires must be less than a week (in seconds); that is, the given X-Amz-Expires must be less than 604800 seconds"),
        (b"-1000", "X-Amz-Expires must be non-negative"),
        (b"ten", "X-Amz-Expires should be a number"),
    ],
)
def test_presigned_v4_expires_messages_are_awss(expires: bytes, message: str) -> None:
    w = Wire(
        "GET",
        b"/bucket/k",
        b"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20261122%2Fus-east-1%2Fs3%2Faws4_request"
        b"&X-Amz-Date=20261122T014018Z&X-Amz-Expires=" + expires + b"&X-Amz-SignedHeaders=host&X-Amz-Signature=00",
        [(b"host", b"h")],
        b"",
    )
    with pytest.raises(S3Error) as e:
        check(w)
    assert (e.value.code, e.value.message) == ("AuthorizationQueryParametersError", message)


@pytest.mark.usefixtures("fixed_time")
def test_presigned_v2_default_boto3() -> None:
    # boto3's default presigned URL in us-east-1 is SigV2
    c = client()
    url = c.generate_presigned_url(
        "get_object", Params={"Bucket": "bucket", "Key": ODD_KEY}, ExpiresIn=600
    )
    w = presigned(url)
    assert b"AWSAccessKeyId=" in w.query_string
    ctx = check(w)
    assert ctx.auth_type == "v2-query" and ctx.principal == KEY
    assert code(w, NOW + timedelta(seconds=601)) == "AccessDenied"
    assert (
        code(Wire("DELETE", w.raw_path, w.query_string, w.headers, b"")) == "SignatureDoesNotMatch"
    )
    assert (
        code(Wire("GET", w.raw_path + b"x", w.query_string, w.headers, b""))
        == "SignatureDoesNotMatch"
    )
    later = w.query_string.replace(
        f"Expires={int(NOW.timestamp()) + 600}".encode(),
        f"Expires={int(NOW.timestamp()) + 6000}".encode(),
    )
    assert later != w.query_string
    assert code(Wire("GET", w.raw_path, later, w.headers, b"")) == "SignatureDoesNotMatch"


@pytest.mark.usefixtures("fixed_time")
def test_presigned_v2_with_subresource() -> None:
    c = client()
    url = c.generate_presigned_url(
        "get_object",
        Params={
            "Bucket": "bucket",
            "Key": "k",
            "VersionId": "v 1",
            "ResponseContentType": "text/plain",
        },
        ExpiresIn=60,
    )
    w = presigned(url)
    check(w)
    tampered = w.query_string.replace(b"versionId=v", b"versionId=w")
    assert tampered != w.query_string
    assert code(Wire("GET", w.raw_path, tampered, w.headers, b"")) == "SignatureDoesNotMatch"


@pytest.mark.usefixtures("fixed_time")
def test_sigv2_header_auth() -> None:
    c = client(signature_version="s3")
    data = b"hello v2"
    w = capture(c, "put_object", Bucket="bucket", Key=ODD_KEY, Body=data, ContentType="text/plain")
    assert w.header_dict()["authorization"].startswith("AWS AKIDEXAMPLE:")
    ctx = check(w)
    assert ctx.auth_type == "v2-header"
    assert body_of(ctx, w) == data
    assert code(w, NOW + timedelta(minutes=16)) == "RequestTimeTooSkewed"
    other = [(k, b"text/html" if k.lower() == b"content-type" else v) for k, v in w.headers]
    assert (
        code(Wire(w.method, w.raw_path, w.query_string, other, w.body)) == "SignatureDoesNotMatch"
    )
    meta = [*w.headers, (b"x-amz-meta-evil", b"1")]
    assert code(Wire(w.method, w.raw_path, w.query_string, meta, w.body)) == "SignatureDoesNotMatch"


# ------------------------------------------------------------------ random keys (property)

_KEYS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
    min_size=1,
    max_size=40,
)


class _Recorder:
    """One client per signature version; the hook records the last request."""

    def __init__(self, signature_version: str | None) -> None:
        self.client = client(signature_version=signature_version)
        self.last: Wire | None = None

        def before_send(request: Any, **_: Any) -> AWSResponse:
            url = urlsplit(request.url)
            headers = [
                (k.encode(), v if isinstance(v, bytes) else v.encode())
                for k, v in request.headers.items()
            ]
            if not any(k.lower() == b"host" for k, _ in headers):
                headers.insert(0, (b"host", url.netloc.encode()))
            self.last = Wire(request.method, url.path.encode(), url.query.encode(), headers, b"")
            return AWSResponse(request.url, 200, {}, _Raw(b""))

        self.client.meta.events.register("before-send.s3.*", before_send)


@pytest.fixture(scope="module")
def recorders() -> dict[str, _Recorder]:
    return {"s3v4": _Recorder("s3v4"), "default": _Recorder(None)}


@pytest.mark.usefixtures("fixed_time")
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=_KEYS, prefix=_KEYS)
def test_random_keys_verify(recorders: dict[str, _Recorder], key: str, prefix: str) -> None:
    v4 = recorders["s3v4"]
    v4.client.head_object(Bucket="bucket", Key=key)
    assert v4.last is not None
    check(v4.last)
    v4.client.list_objects(Bucket="bucket", Prefix=prefix, Marker=key)
    check(v4.last)
    for rec in recorders.values():  # presigned V4 and (boto3's default) V2
        url = rec.client.generate_presigned_url(
            "get_object", Params={"Bucket": "bucket", "Key": key}
        )
        w = presigned(url)
        check(w)
        assert (
            code(Wire("GET", w.raw_path + b"x", w.query_string, w.headers, b""))
            == "SignatureDoesNotMatch"
        )


@pytest.mark.usefixtures("fixed_time")
@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize(
    "algorithm",
    [
        "CRC32",
        "CRC32C",
        "CRC64NVME",
        "SHA1",
        "SHA256",
        "SHA512",
        "XXHASH64",
        "XXHASH3",
        "XXHASH128",
    ],
)
def test_put_object_each_checksum_algorithm(scheme: str, algorithm: str) -> None:
    data = bytes(range(256)) * 40
    w = capture(
        client(scheme),
        "put_object",
        Bucket="bucket",
        Key="k",
        Body=data,
        ChecksumAlgorithm=algorithm,
    )
    ctx = check(w)
    d = BodyDecoder(ctx, w.header_dict())
    assert d.feed(w.body) == data
    sums = d.finish()
    assert sums.algorithm == algorithm
    sent = w.header_dict().get(f"x-amz-checksum-{algorithm.lower()}")
    if sent is None:  # https: sent as a trailer
        sent = (
            w.body.rsplit(f"x-amz-checksum-{algorithm.lower()}:".encode(), 1)[1]
            .split(b"\r\n")[0]
            .decode()
        )
    assert sums.headers() == {f"x-amz-checksum-{algorithm.lower()}": sent}


@pytest.mark.usefixtures("fixed_time")
@pytest.mark.parametrize(
    ("operation", "params"),
    [("list_objects", {}), ("list_objects_v2", {}), ("head_bucket", {}), ("create_bucket", {}),
     ("get_bucket_versioning", {})],
)
def test_sigv2_bucket_requests(operation: str, params: dict[str, Any]) -> None:
    """botocore signs a bucket's resource as `/bucket/` (AWS's definition) for a request to
    `/bucket`; refused until crossbeat accepted that spelling too."""
    w = capture(client(signature_version="s3"), operation, Bucket="bucket", **params)
    assert w.raw_path == b"/bucket"
    assert check(w).auth_type == "v2-header"
    # the resource still names this bucket only
    assert code(Wire(w.method, b"/other", w.query_string, w.headers, w.body)) == "SignatureDoesNotMatch"


# ------------------------------------------------------------------ SigV2 sub-resources

# Reads whose sub-resource botocore's SigV2 signer (HmacV1Auth) leaves out of the canonical
# resource: it signs each as the plain bucket or object GET
_READS_SIGNED_WITHOUT_SUBRESOURCE = [
    ("get_bucket_encryption", {}, b"encryption"),
    ("get_public_access_block", {}, b"publicAccessBlock"),
    ("get_object_retention", {"Key": "k"}, b"retention"),
    ("get_object_legal_hold", {"Key": "k"}, b"legal-hold"),
]
# sub-resources that select another operation (a write, or another read): signed in every
# form crossbeat accepts
_SIGNED_EVERYWHERE = (b"acl", b"uploads", b"tagging", b"versions", b"uploadId=u", b"versionId=v")


def _with_query(w: Wire, extra: bytes) -> Wire:
    query = w.query_string + b"&" + extra if w.query_string else extra
    return Wire(w.method, w.raw_path, query, w.headers, w.body)


@pytest.mark.usefixtures("fixed_time")
@pytest.mark.parametrize(("operation", "params", "sub"), _READS_SIGNED_WITHOUT_SUBRESOURCE)
def test_sigv2_reads_botocore_signs_without_their_subresource(
    operation: str, params: dict[str, Any], sub: bytes
) -> None:
    """Refused with SignatureDoesNotMatch until crossbeat accepted botocore's form for reads.
    What that form leaves unsigned gives a request no other operation than these reads."""
    c = client(signature_version="s3")
    w = capture(c, operation, Bucket="bucket", **params)
    assert sub in w.query_string.split(b"&")
    assert check(w).auth_type == "v2-header"
    url = client().generate_presigned_url(operation, Params={"Bucket": "bucket", **params})
    assert check(presigned(url)).auth_type == "v2-query"
    for extra in _SIGNED_EVERYWHERE:
        assert code(_with_query(w, extra)) == "SignatureDoesNotMatch", extra
    # botocore signs a write with `sub` exactly as the plain write (DeleteBucket, PutObject):
    # verifying that would let anyone holding a signed DeleteBucket delete the bucket's
    # public access block, or a signed PutObject set a retention
    write = (
        capture(c, "put_object", Bucket="bucket", Key="k", Body=b"x")
        if params
        else capture(c, "delete_bucket", Bucket="bucket")
    )
    check(write)
    assert code(_with_query(write, sub)) == "SignatureDoesNotMatch"


@pytest.mark.usefixtures("fixed_time")
def test_sigv2_s3cmd_get_public_access_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """s3cmd (2.4, S3.Crypto.sign_request_v2) signs `GET /bucket/?publicAccessBlock` without
    its sub-resource, as botocore does; refused until crossbeat accepted that form."""
    from S3.Config import Config
    from S3.Crypto import sign_request_v2
    from S3.SortedDict import SortedDict

    cfg = Config()
    monkeypatch.setattr(cfg, "access_key", KEY.access_key)
    monkeypatch.setattr(cfg, "secret_key", KEY.secret_key)
    headers = SortedDict(ignore_case=True)
    headers["x-amz-date"] = formatdate(NOW.timestamp(), usegmt=True)
    signed = sign_request_v2("GET", "/bucket/", {"publicAccessBlock": None}, headers)
    w = Wire(
        "GET",
        b"/bucket/",
        b"publicAccessBlock",
        [(b"host", b"127.0.0.1:9000"), *((k.encode(), v.encode()) for k, v in signed.items())],
        b"",
    )
    assert check(w).auth_type == "v2-header"
    assert code(_with_query(w, b"acl")) == "SignatureDoesNotMatch"
