"""authenticate(): the captured client requests verify; any tampering is refused.

The captures (boto3, rclone, s3cmd, signed 2026-11-22) live in the shared reference folder;
their tests are skipped where it is absent, and two of them are repeated inline so the SigV4
vectors always run.
"""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossbeat.s3.auth import AuthContext, Principal, authenticate, canonical_query, canonical_uri
from crossbeat.s3.body import BodyDecoder
from crossbeat.s3.errors import S3Error
from tests.unit.s3.captures import SECRETS, Capture, load_all

CAPTURES = load_all()
needs_captures = pytest.mark.skipif(not CAPTURES, reason="shared S3 wire captures not present")
BOTO_KEY = Principal("AKIDEXAMPLE", SECRETS["boto3"], "boto3")


def capture_now(cap: Capture) -> datetime:
    return datetime.strptime(cap.header("x-amz-date") or "", "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


def auth(cap: Capture, **changes: object) -> AuthContext:
    """Authenticate `cap` with fields replaced by `changes` (method, raw_path, …, now)."""
    principal = Principal("AKIDEXAMPLE", cap.secret, "capture")
    args: dict[str, object] = {
        "method": cap.method,
        "raw_path": cap.raw_path,
        "query_string": cap.query_string,
        "headers": cap.headers,
        "lookup": lambda ak: principal if ak == principal.access_key else None,
        "now": capture_now(cap),
    }
    args.update(changes)
    return authenticate(**args)  # type: ignore[arg-type]


def code_of(cap: Capture, **changes: object) -> str:
    with pytest.raises(S3Error) as e:
        auth(cap, **changes)
    return e.value.code


def signed_headers(cap: Capture) -> list[str]:
    m = re.search(r"SignedHeaders=([^,]+)", cap.header("authorization") or "")
    assert m
    return m.group(1).split(";")


def replace_header(cap: Capture, name: str, value: bytes) -> list[tuple[bytes, bytes]]:
    return [(k, value if k.lower() == name.encode() else v) for k, v in cap.headers]


def tweak(value: bytes) -> bytes:
    """A different value of the same shape (digit → digit, letter → letter)."""
    last = value[-1:]
    if last.isdigit():
        new = b"%d" % ((int(last) + 1) % 10)
    elif last.isalpha():
        new = b"b" if last != b"b" else b"c"
    else:
        new = b"x"
    return value[:-1] + new


def ids(caps: list[Capture]) -> list[str]:
    return [c.name for c in caps]


# ------------------------------------------------------------------ every capture verifies


@needs_captures
@pytest.mark.parametrize("cap", CAPTURES, ids=ids(CAPTURES))
def test_capture_verifies(cap: Capture) -> None:
    ctx = auth(cap)
    assert ctx.principal is not None and ctx.principal.access_key == "AKIDEXAMPLE"
    assert ctx.auth_type == "v4-header"
    if cap.body is None:
        return
    decoder = BodyDecoder(ctx, cap.header_dict())
    out = decoder.feed(cap.body)
    sums = decoder.finish()
    assert len(out) == (decoder.decoded_length if decoder.decoded_length is not None else len(out))
    echoed = {k: v for k, v in cap.header_dict().items() if k.startswith("x-amz-checksum-crc")}
    if echoed:
        assert sums.headers() == echoed


BODY_CAPTURES = [c for c in CAPTURES if c.body]


@needs_captures
@pytest.mark.parametrize("cap", BODY_CAPTURES, ids=ids(BODY_CAPTURES))
def test_tampered_capture_body_is_refused(cap: Capture) -> None:
    ctx = auth(cap)
    assert cap.body
    headers = cap.header_dict()
    if headers.get("x-amz-decoded-content-length") == "0":
        body = cap.body.replace(b"AAAAAA==", b"AAAAAQ==")  # no data: change the trailer value
    else:
        # flip one object byte (for aws-chunked, one byte of the first chunk's data)
        at = cap.body.index(b"\r\n") + 2 if ctx.payload_mode.startswith("streaming") else 0
        body = cap.body[:at] + bytes([cap.body[at] ^ 1]) + cap.body[at + 1 :]
    assert body != cap.body
    decoder = BodyDecoder(ctx, headers)
    with pytest.raises(S3Error) as e:
        decoder.feed(body)
        decoder.finish()
    # every captured body is protected by a hex payload hash, Content-MD5 or a checksum
    assert e.value.code == (
        "XAmzContentSHA256Mismatch" if ctx.payload_mode == "hex" else "BadDigest"
    )


SWAPPED_MODES = {
    b"UNSIGNED-PAYLOAD": b"STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    b"STREAMING-UNSIGNED-PAYLOAD-TRAILER": b"UNSIGNED-PAYLOAD",
}
SIGNED = [(c, h) for c in CAPTURES for h in signed_headers(c)]


@needs_captures
@pytest.mark.parametrize(("cap", "name"), SIGNED, ids=[f"{c.name}:{h}" for c, h in SIGNED])
def test_tampered_signed_header_is_refused(cap: Capture, name: str) -> None:
    value = (cap.header(name) or "").encode("latin-1")
    if name == "x-amz-date":
        new = (capture_now(cap) + timedelta(seconds=1)).strftime("%Y%m%dT%H%M%SZ").encode()
    elif value in SWAPPED_MODES:
        new = SWAPPED_MODES[value]  # e.g. a downgrade to an unsigned payload
    else:
        new = tweak(value)
    assert code_of(cap, headers=replace_header(cap, name, new)) == "SignatureDoesNotMatch"


@needs_captures
@pytest.mark.parametrize("cap", CAPTURES, ids=ids(CAPTURES))
def test_tampered_request_line_is_refused(cap: Capture) -> None:
    assert code_of(cap, raw_path=cap.raw_path + b"x") == "SignatureDoesNotMatch"
    assert code_of(cap, method="DELETE" if cap.method != "DELETE" else "GET") == (
        "SignatureDoesNotMatch"
    )
    assert code_of(cap, query_string=cap.query_string + b"&versionId=1") == "SignatureDoesNotMatch"
    if cap.query_string:
        assert code_of(cap, query_string=tweak(cap.query_string)) == "SignatureDoesNotMatch"


@needs_captures
def test_other_checks_on_captures() -> None:
    cap = next(c for c in CAPTURES if c.name == "captures/put_bytes/001")
    now = capture_now(cap)
    # skew: ±15 minutes
    auth(cap, now=now + timedelta(minutes=14))
    auth(cap, now=now - timedelta(minutes=14))
    assert code_of(cap, now=now + timedelta(minutes=16)) == "RequestTimeTooSkewed"
    assert code_of(cap, now=now - timedelta(minutes=16)) == "RequestTimeTooSkewed"
    assert code_of(cap, lookup=lambda ak: None) == "InvalidAccessKeyId"
    wrong = Principal("AKIDEXAMPLE", "not-the-secret", "x")
    assert code_of(cap, lookup=lambda ak: wrong) == "SignatureDoesNotMatch"
    # an x-amz header nobody signed (e.g. injected metadata)
    extra = [*cap.headers, (b"x-amz-meta-evil", b"1")]
    assert code_of(cap, headers=extra) == "AccessDenied"
    # header names are case-insensitive, and unsigned non-amz headers don't matter
    relaxed = [(k.upper(), v) for k, v in cap.headers] + [(b"X-Forwarded-For", b"1.2.3.4")]
    auth(cap, headers=relaxed)


# ------------------------------------------------------------------ inline vectors (always run)

PUT_HTTP = Capture(
    name="inline/put_bytes",
    method="PUT",
    raw_path=b"/bucket/dir/hello%20world.txt",
    query_string=b"",
    headers=[
        (b"Accept-Encoding", b"identity"),
        (b"Expect", b"100-continue"),
        (b"x-amz-checksum-crc32", b"DUoRhQ=="),
        (b"x-amz-sdk-checksum-algorithm", b"CRC32"),
        (b"host", b"127.0.0.1:18501"),
        (b"X-Amz-Date", b"20261122T014018Z"),
        (
            b"x-amz-content-sha256",
            b"b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9",
        ),
        (
            b"Authorization",
            b"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261122/us-east-1/s3/aws4_request, "
            b"SignedHeaders=host;x-amz-checksum-crc32;x-amz-content-sha256;x-amz-date;"
            b"x-amz-sdk-checksum-algorithm, "
            b"Signature=9f8f12a7d261f7a4d521c4f5ab24f509e4f1ef67134412be7076e6765f2a6649",
        ),
        (b"Content-Length", b"11"),
    ],
    body_length=11,
    head=b"hello world",
    tail=None,
    body=b"hello world",
)
PUT_HTTPS = Capture(
    name="inline/put_bytes_tls",
    method="PUT",
    raw_path=b"/bucket/dir/hello%20world.txt",
    query_string=b"",
    headers=[
        (b"Accept-Encoding", b"identity"),
        (b"Expect", b"100-continue"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Content-Encoding", b"aws-chunked"),
        (b"X-Amz-Trailer", b"x-amz-checksum-crc32"),
        (b"X-Amz-Decoded-Content-Length", b"11"),
        (b"x-amz-sdk-checksum-algorithm", b"CRC32"),
        (b"host", b"127.0.0.1:18601"),
        (b"X-Amz-Date", b"20261122T014122Z"),
        (b"x-amz-content-sha256", b"STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
        (
            b"Authorization",
            b"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261122/us-east-1/s3/aws4_request, "
            b"SignedHeaders=content-encoding;host;x-amz-content-sha256;x-amz-date;"
            b"x-amz-decoded-content-length;x-amz-sdk-checksum-algorithm;x-amz-trailer, "
            b"Signature=317678f2e025644dd26e3d9fbe8570d708c3d6948edc249ab2585d7a1d094357",
        ),
    ],
    body_length=52,
    head=b"",
    tail=None,
    body=b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n",
)


@pytest.mark.parametrize("cap", [PUT_HTTP, PUT_HTTPS], ids=["http", "https"])
def test_inline_vectors(cap: Capture) -> None:
    ctx = auth(cap)
    assert ctx.payload_mode == ("hex" if cap is PUT_HTTP else "streaming-unsigned-trailer")
    decoder = BodyDecoder(ctx, cap.header_dict())
    assert cap.body is not None
    assert decoder.feed(cap.body) == b"hello world"
    assert decoder.finish().headers() == {"x-amz-checksum-crc32": "DUoRhQ=="}
    assert code_of(cap, raw_path=b"/bucket/dir/hello%20world.txx") == "SignatureDoesNotMatch"
    tampered = replace_header(cap, "x-amz-sdk-checksum-algorithm", b"CRC32C")
    assert code_of(cap, headers=tampered) == "SignatureDoesNotMatch"


def test_inline_vectors_match_the_capture_files() -> None:
    by_name = {c.name: c for c in CAPTURES}
    for inline, name in (
        (PUT_HTTP, "captures/put_bytes/001"),
        (PUT_HTTPS, "captures_tls/put_bytes/001"),
    ):
        if name in by_name:
            assert by_name[name].body == inline.body
            assert by_name[name].header("authorization") == inline.header("authorization")


# ------------------------------------------------------------------ malformed and other schemes


def bare(headers: dict[str, str], query: bytes = b"", method: str = "GET") -> str:
    with pytest.raises(S3Error) as e:
        authenticate(
            method,
            b"/bucket/key",
            query,
            [(k.encode(), v.encode()) for k, v in headers.items()],
            lambda ak: BOTO_KEY,
            now=datetime(2026, 11, 22, 1, 40, tzinfo=UTC),
        )
    return e.value.code


V4 = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261122/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=" + "0" * 64  # fmt: skip
BASE = {
    "host": "h",
    "x-amz-date": "20261122T014000Z",
    "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
}


@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        (V4, "SignatureDoesNotMatch"),
        (V4.replace("Credential=", "Cred="), "AuthorizationHeaderMalformed"),
        (V4.replace(", Signature=" + "0" * 64, ""), "AuthorizationHeaderMalformed"),
        (V4.replace("/s3/", "/ec2/"), "AuthorizationHeaderMalformed"),
        (V4.replace("aws4_request", "aws5_request"), "AuthorizationHeaderMalformed"),
        (V4.replace("20261122/", "20261121/"), "AuthorizationHeaderMalformed"),
        (V4.replace("host;", ""), "AuthorizationHeaderMalformed"),
        (V4.replace("Credential=AKIDEXAMPLE/", "Credential="), "AuthorizationHeaderMalformed"),
        (V4.replace("AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256"), "NotImplemented"),
        # AWS's codes for a scheme it does not know and for a SigV2 header without its parts
        ("Bearer xyz", "InvalidArgument"),
        ("AWS AKIDEXAMPLE", "InvalidArgument"),
        ("AWS :c2ln", "InvalidArgument"),
    ],
)
def test_malformed_authorization(authorization: str, code: str) -> None:
    assert bare({**BASE, "authorization": authorization}) == code


@pytest.mark.parametrize("empty", ["", " "])
def test_an_empty_authorization_is_no_credentials(empty: str) -> None:
    """As AWS takes it: anonymous (which the gateway refuses with 403 AccessDenied), not an
    unknown scheme (400 InvalidArgument)."""
    ctx = authenticate(
        "PUT", b"/bucket/key", b"", [(k.encode(), v.encode()) for k, v in {**BASE, "authorization": empty}.items()],
        lambda ak: BOTO_KEY, now=datetime(2026, 11, 22, 1, 40, tzinfo=UTC),
    )
    assert ctx.principal is None


@pytest.mark.parametrize(
    ("date", "code"),
    [
        ("Tue, 07 Jul 1950 21:53:04 GMT", "AccessDenied"),  # before 1970: not a date AWS takes
        ("Wed, 07 Jul 2010 21:53:04 GMT", "RequestTimeTooSkewed"),
        ("Sun, 07 Jul 2030 21:53:04 GMT", "RequestTimeTooSkewed"),
    ],
)
def test_sigv2_dates_far_off(date: str, code: str) -> None:
    headers = {"host": "h", "date": date, "authorization": "AWS AKIDEXAMPLE:c2lnbmF0dXJl"}
    assert bare(headers, method="PUT") == code


def test_payload_hash_forms() -> None:
    assert bare({**BASE, "x-amz-content-sha256": "nope", "authorization": V4}) == "InvalidArgument"
    assert (
        bare(
            {
                **BASE,
                "x-amz-content-sha256": "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
                "authorization": V4,
            }
        )
        == "NotImplemented"
    )
    no_sha = {k: v for k, v in BASE.items() if k != "x-amz-content-sha256"}
    assert (
        bare({**no_sha, "content-length": "5", "authorization": V4}, method="PUT")
        == "InvalidRequest"
    )


def test_header_and_query_auth_together() -> None:
    assert (
        bare({**BASE, "authorization": V4}, b"X-Amz-Algorithm=AWS4-HMAC-SHA256")
        == "InvalidArgument"
    )


def test_anonymous_request() -> None:
    ctx = authenticate("GET", b"/bucket/key", b"", [(b"host", b"h")], lambda ak: BOTO_KEY)
    assert ctx.principal is None
    assert ctx.auth_type == "anonymous"


def test_missing_date() -> None:
    headers = {k: v for k, v in BASE.items() if k != "x-amz-date"}
    assert bare({**headers, "authorization": V4}) == "AccessDenied"


@pytest.mark.parametrize(
    ("query", "code"),
    [
        (b"X-Amz-Algorithm=AWS4-HMAC-SHA1", "AuthorizationQueryParametersError"),
        (b"X-Amz-Algorithm=AWS4-ECDSA-P256-SHA256", "NotImplemented"),
        (
            b"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261122T014000Z",
            "AuthorizationQueryParametersError",
        ),
    ],
)
def test_malformed_presigned_v4(query: bytes, code: str) -> None:
    assert bare({"host": "h"}, query) == code


# ------------------------------------------------------------------ canonical forms


def test_canonical_uri_and_query() -> None:
    assert canonical_uri(b"/b/a%20b/c+d~e!f") == "/b/a%20b/c%2Bd~e%21f"
    assert canonical_uri(b"/b/%C3%BC//./x") == "/b/%C3%BC//./x"
    assert canonical_uri("/b/ü".encode()) == "/b/%C3%BC"
    q = [
        (b"uploads", b""),
        (b"prefix", b"a%20b/"),
        (b"x-id", b"GetObject"),
        (b"a", b"2"),
        (b"a", b"1"),
    ]
    assert canonical_query(q) == "a=1&a=2&prefix=a%20b%2F&uploads=&x-id=GetObject"
    assert canonical_query([(b"p", b"a+b")]) == "p=a%2Bb"


@needs_captures
def test_naive_now_is_utc() -> None:
    cap = CAPTURES[0]
    auth(cap, now=capture_now(cap).replace(tzinfo=None))


def test_non_ascii_signature_is_a_mismatch() -> None:
    assert bare({**BASE, "authorization": V4.replace("Signature=0", "Signature=\xe9")}) == (
        "SignatureDoesNotMatch"
    )


# ------------------------------------------------------------------ fuzzing: only S3Error escapes

_HEADER_NAMES = [
    b"authorization", b"x-amz-date", b"date", b"x-amz-content-sha256", b"host", b"content-length",
]  # fmt: skip
_QUERY_PREFIXES = [
    b"",
    b"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20261122%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261122T014018Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&",
    b"AWSAccessKeyId=AKIDEXAMPLE&Expires=1795311700&",
]


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(_HEADER_NAMES),
    value=st.binary(max_size=120),
    prefix=st.sampled_from(_QUERY_PREFIXES),
    query=st.binary(max_size=60),
    path=st.binary(max_size=30),
    drop_auth=st.booleans(),
)
def test_fuzzed_requests_only_raise_s3_errors(
    name: bytes, value: bytes, prefix: bytes, query: bytes, path: bytes, drop_auth: bool
) -> None:
    headers = [
        (k, v) for k, v in PUT_HTTP.headers if not (drop_auth and k.lower() == b"authorization")
    ]
    headers = [(k, v) for k, v in headers if k.lower() != name] + [(name, value)]
    with contextlib.suppress(S3Error):
        auth(PUT_HTTP, headers=headers, query_string=prefix + query, raw_path=b"/" + path)


@settings(max_examples=200, deadline=None)
@given(authorization=st.text(max_size=200))
def test_fuzzed_authorization_values(authorization: str) -> None:
    for prefix in ("", "AWS4-HMAC-SHA256 ", "AWS "):
        with contextlib.suppress(S3Error):
            authenticate(
                "GET",
                b"/b/k",
                b"",
                [(b"host", b"h"), (b"authorization", (prefix + authorization).encode("utf-8"))],
                lambda ak: BOTO_KEY,
                now=datetime(2026, 11, 22, 1, 40, tzinfo=UTC),
            )


def test_unicode_digits_are_not_numbers() -> None:
    # "²".isdigit() is True but int("²") fails: these must be clean S3 errors
    v2 = b"AWSAccessKeyId=AKIDEXAMPLE&Signature=x&Expires=%C2%B2"
    assert bare({"host": "h"}, v2) == "AccessDenied"
    v4 = (
        _QUERY_PREFIXES[1].replace(b"X-Amz-Expires=60", b"X-Amz-Expires=%C2%B2")
        + b"X-Amz-Signature=0"
    )
    assert bare({"host": "h"}, v4) == "AuthorizationQueryParametersError"
    cred = _QUERY_PREFIXES[1].replace(b"20261122%2F", b"2026112%C2%B2%2F") + b"X-Amz-Signature=0"
    assert bare({"host": "h"}, cred) == "AuthorizationQueryParametersError"
