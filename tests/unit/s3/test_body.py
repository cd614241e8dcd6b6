"""BodyDecoder: aws-chunked decoding and payload verification.

Vectors: the AWS documentation's streaming examples (seed 4f232c43…, trailer seed 106e2a8a…),
whose chunk and trailer signatures are written out literally below, and botocore's own
aws-chunked encoder (`AwsChunkedWrapper`) for unsigned trailers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
from datetime import UTC, datetime

import pytest
from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossbeat.s3.auth import AuthContext, Principal, authenticate
from crossbeat.s3.body import BodyDecoder
from crossbeat.s3.errors import S3Error
from crossbeat.s3.objectmeta import stored_content_encoding

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

# ------------------------------------------------------------------ AWS documented examples

AWS_KEY = Principal(
    "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws-example"
)
AWS_NOW = datetime(2013, 5, 24, 0, 0, 10, tzinfo=UTC)
AWS_DATA = b"a" * 66560  # 64 KiB chunk + 1 KiB chunk + final 0-byte chunk
SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
CHUNK_SIGS = [
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
]
TRAILER_SEED = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"
TRAILER_CHUNK_SIGS = [
    "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
    "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
    "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
]
TRAILER_SIG = "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"


def aws_request(trailer: bool) -> tuple[AuthContext, dict[str, str]]:
    """Authenticate the AWS example request's headers; returns its context and headers."""
    headers = {
        "host": "s3.amazonaws.com",
        "x-amz-date": "20130524T000000Z",
        "x-amz-storage-class": "REDUCED_REDUNDANCY",
        "content-encoding": "aws-chunked",
        "x-amz-decoded-content-length": "66560",
    }
    if trailer:
        headers["x-amz-content-sha256"] = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
        headers["x-amz-trailer"] = "x-amz-checksum-crc32c"
        signed = "content-encoding;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer"
        seed = TRAILER_SEED
    else:
        headers["x-amz-content-sha256"] = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
        headers["content-length"] = "66824"
        signed = "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class"
        seed = SEED
    headers["authorization"] = (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        f"SignedHeaders={signed},Signature={seed}"
    )
    ctx = authenticate(
        "PUT",
        b"/examplebucket/chunkObject.txt",
        b"",
        [(k.encode(), v.encode()) for k, v in headers.items()],
        lambda ak: AWS_KEY if ak == AWS_KEY.access_key else None,
        now=AWS_NOW,
    )
    return ctx, headers


def aws_body(trailer: bool) -> bytes:
    sigs = TRAILER_CHUNK_SIGS if trailer else CHUNK_SIGS
    body = (
        b"10000;chunk-signature=%s\r\n" % sigs[0].encode()
        + b"a" * 65536
        + b"\r\n400;chunk-signature=%s\r\n" % sigs[1].encode()
        + b"a" * 1024
        + b"\r\n0;chunk-signature=%s\r\n" % sigs[2].encode()
    )
    if trailer:
        body += (
            b"x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:%s\r\n"
            % TRAILER_SIG.encode()
        )
    return body + b"\r\n"


def decode(ctx: AuthContext, headers: dict[str, str], pieces: list[bytes]) -> tuple[bytes, object]:
    d = BodyDecoder(ctx, headers)
    out = b"".join(d.feed(p) for p in pieces)
    return out, d.finish()


def error_code(ctx: AuthContext, headers: dict[str, str], body: bytes) -> str:
    with pytest.raises(S3Error) as e:
        decode(ctx, headers, [body])
    return e.value.code


@pytest.mark.parametrize("trailer", [False, True])
def test_aws_documented_streaming_example(trailer: bool) -> None:
    ctx, headers = aws_request(trailer)
    assert ctx.payload_mode == ("streaming-signed-trailer" if trailer else "streaming-signed")
    out, sums = decode(ctx, headers, [aws_body(trailer)])
    assert out == AWS_DATA
    assert sums.md5_hex == hashlib.md5(AWS_DATA).hexdigest()  # type: ignore[attr-defined]
    if trailer:
        assert sums.headers() == {"x-amz-checksum-crc32c": "sOO8/Q=="}  # type: ignore[attr-defined]


@pytest.mark.parametrize("trailer", [False, True])
def test_aws_example_byte_by_byte(trailer: bool) -> None:
    ctx, headers = aws_request(trailer)
    body = aws_body(trailer)
    out, _ = decode(ctx, headers, [body[i : i + 1] for i in range(len(body))])
    assert out == AWS_DATA


@pytest.mark.parametrize("trailer", [False, True])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(0, 66900), max_size=12))
def test_aws_example_random_splits(trailer: bool, cuts: list[int]) -> None:
    ctx, headers = aws_request(trailer)
    body = aws_body(trailer)
    bounds = sorted({0, len(body), *(c for c in cuts if c < len(body))})
    out, _ = decode(ctx, headers, [body[a:b] for a, b in zip(bounds, bounds[1:], strict=False)])
    assert out == AWS_DATA


@pytest.mark.parametrize(
    ("trailer", "old", "new"),
    [
        (False, b"aaaa\r\n400;", b"aaab\r\n400;"),  # data of the first chunk
        (False, CHUNK_SIGS[1][:8].encode(), b"00000000"),  # a chunk signature
        (False, CHUNK_SIGS[2][:8].encode(), b"00000000"),  # the final chunk signature
        (True, TRAILER_SIG[:8].encode(), b"00000000"),  # the trailer signature
        (True, b"sOO8/Q==", b"AAAAAA=="),  # the trailer itself: signature covers it
    ],
)
def test_tampered_signed_stream(trailer: bool, old: bytes, new: bytes) -> None:
    ctx, headers = aws_request(trailer)
    body = aws_body(trailer)
    assert old in body
    assert error_code(ctx, headers, body.replace(old, new, 1)) == "SignatureDoesNotMatch"


def test_signed_chunks_cannot_be_dropped_or_reordered() -> None:
    ctx, headers = aws_request(False)
    body = aws_body(False)
    first_end = body.index(b"\r\n400;") + 2
    second_end = body.index(b"\r\n0;") + 2
    # drop the 1 KiB chunk (decoded length fixed up so only the signature can notice)
    dropped = body[:first_end] + body[second_end:]
    headers = dict(headers, **{"x-amz-decoded-content-length": "65536"})
    assert error_code(ctx, headers, dropped) == "SignatureDoesNotMatch"


def test_signed_stream_without_chunk_signature() -> None:
    ctx, headers = aws_request(False)
    body = b"400\r\n" + b"a" * 1024 + b"\r\n0\r\n\r\n"
    headers = dict(headers, **{"x-amz-decoded-content-length": "1024"})
    assert error_code(ctx, headers, body) == "SignatureDoesNotMatch"


def test_truncated_signed_stream_is_incomplete() -> None:
    ctx, headers = aws_request(True)
    body = aws_body(True)
    for cut in (10, 40000, 65600, len(body) - 60):
        assert error_code(ctx, headers, body[:cut]) == "IncompleteBody"


def test_data_after_the_end_is_refused() -> None:
    ctx, headers = aws_request(False)
    assert error_code(ctx, headers, aws_body(False) + b"5\r\nhello\r\n") == "InvalidRequest"


# ------------------------------------------------------------------ unsigned trailers (botocore)


def unsigned_ctx(mode: str = "streaming-unsigned-trailer") -> AuthContext:
    return AuthContext(Principal("AK", "SK", "u"), mode, None, None, None, None, None)


def botocore_chunked(data: bytes, chunk_size: int = 1024 * 1024) -> bytes:
    """What botocore sends over https (after HTTP de-chunking)."""
    wrapper = AwsChunkedWrapper(
        io.BytesIO(data),
        checksum_cls=Crc32Checksum,
        checksum_name="x-amz-checksum-crc32",
        chunk_size=chunk_size,
    )
    return bytes(wrapper.read())


def trailer_headers(data: bytes) -> dict[str, str]:
    return {
        "content-encoding": "aws-chunked",
        "x-amz-trailer": "x-amz-checksum-crc32",
        "x-amz-decoded-content-length": str(len(data)),
        "x-amz-sdk-checksum-algorithm": "CRC32",
        "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    }


def test_captured_botocore_https_body() -> None:
    body = b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n"
    assert botocore_chunked(b"hello world") == body
    out, sums = decode(unsigned_ctx(), trailer_headers(b"hello world"), [body])
    assert out == b"hello world"
    assert sums.headers() == {"x-amz-checksum-crc32": "DUoRhQ=="}  # type: ignore[attr-defined]


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(max_size=5000),
    chunk_size=st.integers(1, 2048),
    cuts=st.lists(st.integers(0, 20000), max_size=10),
)
def test_unsigned_chunked_random_splits_equal_one_shot(
    data: bytes, chunk_size: int, cuts: list[int]
) -> None:
    body = botocore_chunked(data, chunk_size)
    headers = trailer_headers(data)
    one_shot, sums = decode(unsigned_ctx(), headers, [body])
    bounds = sorted({0, len(body), *(c for c in cuts if c < len(body))})
    split, split_sums = decode(
        unsigned_ctx(), headers, [body[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    )
    assert one_shot == split == data
    assert sums == split_sums


def test_unsigned_chunked_byte_by_byte() -> None:
    data = bytes(range(256)) * 5
    body = botocore_chunked(data, 100)
    out, _ = decode(
        unsigned_ctx(), trailer_headers(data), [body[i : i + 1] for i in range(len(body))]
    )
    assert out == data


def test_wrong_trailer_checksum_is_bad_digest() -> None:
    body = b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"
    assert error_code(unsigned_ctx(), trailer_headers(b"hello world"), body) == "BadDigest"


def test_tampered_data_fails_trailer_checksum() -> None:
    body = b"b\r\nhello World\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n"
    assert error_code(unsigned_ctx(), trailer_headers(b"hello world"), body) == "BadDigest"


def test_missing_declared_trailer_is_refused() -> None:
    body = b"b\r\nhello world\r\n0\r\n\r\n"
    assert error_code(unsigned_ctx(), trailer_headers(b"hello world"), body) == "InvalidRequest"


def test_trailer_without_final_blank_line_is_tolerated() -> None:
    body = b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n"
    out, _ = decode(unsigned_ctx(), trailer_headers(b"hello world"), [body])
    assert out == b"hello world"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"zz\r\nhello world\r\n0\r\n\r\n", "InvalidRequest"),  # bad size
        (b"b\nhello world\r\n0\r\n\r\n", "InvalidRequest"),  # bare LF
        (b"a\r\nhello world\r\n0\r\n\r\n", "InvalidRequest"),  # chunk longer than its size
        (b"c\r\nhello world\r\n0\r\n\r\n", "IncompleteBody"),  # more than the decoded length
        (b"b\r\nhello world\r\n", "IncompleteBody"),  # no final chunk
        (b"1" * 5000, "InvalidRequest"),  # endless header line
    ],
)
def test_malformed_framing(body: bytes, code: str) -> None:
    headers = trailer_headers(b"hello world")
    del headers["x-amz-trailer"]
    assert error_code(unsigned_ctx(), headers, body) == code


def test_decoded_length_mismatch_is_incomplete_body() -> None:
    headers = trailer_headers(b"hello world!")  # declares 12 bytes, sends 11
    body = b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n"
    assert error_code(unsigned_ctx(), headers, body) == "IncompleteBody"
    headers = trailer_headers(b"hello")  # declares 5, sends 11: refused while feeding
    d = BodyDecoder(unsigned_ctx(), headers)
    with pytest.raises(S3Error) as e:
        d.feed(body)
    assert e.value.code == "IncompleteBody"


def test_gzip_aws_chunked_stores_gzip() -> None:
    assert stored_content_encoding("gzip,aws-chunked") == "gzip"
    assert stored_content_encoding("aws-chunked") is None
    # the rest stays as sent: botocore appends ",aws-chunked" to the caller's value
    assert stored_content_encoding("deflate, gzip,aws-chunked") == "deflate, gzip"
    assert stored_content_encoding("aws-chunked, br") == "br"
    assert stored_content_encoding("gzip") == "gzip"
    assert stored_content_encoding(None) is None
    assert stored_content_encoding("gzip") == "gzip"


# ------------------------------------------------------------------ plain bodies


def hex_ctx(data: bytes) -> AuthContext:
    return AuthContext(
        Principal("AK", "SK", "u"), "hex", hashlib.sha256(data).hexdigest(), None, None, None, None
    )


def test_plain_feed_returns_the_same_object() -> None:
    data = b"x" * 100000
    d = BodyDecoder(
        hex_ctx(data), {"content-length": str(len(data)), "x-amz-checksum-crc32": "AAAAAA=="}
    )
    assert d.feed(data) is data


def test_hex_payload_verified_at_finish() -> None:
    data = b"hello world"
    out, sums = decode(hex_ctx(data), {"content-length": "11"}, [b"hello ", b"world"])
    assert out == data
    assert sums.md5_hex == "5eb63bbbe01eeed093cb22bb8f5acdc3"  # type: ignore[attr-defined]
    assert error_code(hex_ctx(data), {"content-length": "11"}, b"hello World") == (
        "XAmzContentSHA256Mismatch"
    )


def test_content_md5() -> None:
    data = b"hello world"
    good = base64.b64encode(hashlib.md5(data).digest()).decode()
    ctx = unsigned_ctx("unsigned")
    out, _ = decode(ctx, {"content-md5": good}, [data])
    assert out == data
    assert error_code(ctx, {"content-md5": good}, b"hello World") == "BadDigest"
    for bad in ("nope", "AAAA", good[:-4]):
        with pytest.raises(S3Error) as e:
            BodyDecoder(ctx, {"content-md5": bad})
        assert e.value.code == "InvalidDigest"


@pytest.mark.parametrize(
    ("algorithm", "value"),
    [
        ("crc32", "DUoRhQ=="),
        ("crc32c", "yZRlqg=="),
        ("crc64nvme", "jSnVw/bqjr4="),
        ("sha1", "Kq5sNclPz7QV2+lfQIuc6R7oRu0="),
        ("sha256", "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek="),
    ],
)
def test_checksum_header_verified_and_echoed(algorithm: str, value: str) -> None:
    ctx = unsigned_ctx("unsigned")
    headers = {f"x-amz-checksum-{algorithm}": value, "content-length": "11"}
    _, sums = decode(ctx, headers, [b"hello world"])
    assert sums.headers() == {f"x-amz-checksum-{algorithm}": value}  # type: ignore[attr-defined]
    assert error_code(ctx, headers, b"hello World") == "BadDigest"


def test_sdk_algorithm_alone_is_computed_and_echoed() -> None:
    _, sums = decode(
        unsigned_ctx("unsigned"), {"x-amz-sdk-checksum-algorithm": "CRC32"}, [b"hello world"]
    )
    assert sums.headers() == {"x-amz-checksum-crc32": "DUoRhQ=="}  # type: ignore[attr-defined]


def test_default_algorithm() -> None:
    d = BodyDecoder(unsigned_ctx("unsigned"), {}, default_algorithm="CRC64NVME")
    d.feed(b"hello world")
    assert d.finish().headers() == {"x-amz-checksum-crc64nvme": "jSnVw/bqjr4="}


def test_no_checksum_asked_no_checksum_echoed() -> None:
    _, sums = decode(unsigned_ctx("none"), {}, [b"abc"])
    assert sums.headers() == {}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "headers",
    [
        {"x-amz-checksum-crc32": "DUoRhQ==", "x-amz-checksum-sha1": "Kq5sNclPz7QV2+lfQIuc6R7oRu0="},
        {"x-amz-checksum-crc16": "AAA="},
        {"x-amz-checksum-crc32": "not-base64"},
        {"x-amz-checksum-crc32": "AAAAAAAA"},  # wrong length
        {"x-amz-sdk-checksum-algorithm": "CRC16"},
        {"x-amz-sdk-checksum-algorithm": "SHA1", "x-amz-checksum-crc32": "DUoRhQ=="},
        {"x-amz-trailer": "x-amz-checksum-crc32"},  # trailer on a plain body
    ],
)
def test_checksum_headers_validated_up_front(headers: dict[str, str]) -> None:
    with pytest.raises(S3Error) as e:
        BodyDecoder(unsigned_ctx("unsigned"), headers)
    assert e.value.code == "InvalidRequest"


def test_checksum_header_plus_trailer_is_two_checksums() -> None:
    headers = trailer_headers(b"hello world")
    headers["x-amz-checksum-sha1"] = "Kq5sNclPz7QV2+lfQIuc6R7oRu0="
    with pytest.raises(S3Error) as e:
        BodyDecoder(unsigned_ctx(), headers)
    assert e.value.code == "InvalidRequest"


def test_checksum_mode_and_algorithm_headers_are_not_values() -> None:
    headers = {"x-amz-checksum-mode": "ENABLED", "x-amz-checksum-algorithm": "CRC32"}
    _, sums = decode(unsigned_ctx("unsigned"), headers, [b"x"])
    assert sums.algorithm is None  # type: ignore[attr-defined]


def test_short_plain_body_is_incomplete() -> None:
    assert error_code(unsigned_ctx("unsigned"), {"content-length": "12"}, b"hello world") == (
        "IncompleteBody"
    )


# ------------------------------------------------------------------ signed streaming, own encoder


def sign_stream(
    ctx: AuthContext, data: bytes, chunk: int, trailers: list[tuple[str, str]]
) -> bytes:
    """A client's STREAMING-AWS4-HMAC-SHA256-PAYLOAD(-TRAILER) body for `ctx`."""
    assert ctx.signing_key and ctx.seed_signature
    prev = ctx.seed_signature
    out = []
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] + [b""]
    for piece in pieces:
        sts = "\n".join(
            (
                "AWS4-HMAC-SHA256-PAYLOAD",
                ctx.amz_date or "",
                ctx.scope or "",
                prev,
                EMPTY_SHA256,
                hashlib.sha256(piece).hexdigest(),
            )
        )
        prev = hmac.new(ctx.signing_key, sts.encode(), hashlib.sha256).hexdigest()
        out.append(b"%x;chunk-signature=%s\r\n" % (len(piece), prev.encode()))
        if piece:
            out.append(piece + b"\r\n")
    if ctx.payload_mode == "streaming-signed-trailer":
        canonical = "".join(f"{n}:{v}\n" for n, v in trailers)
        sts = "\n".join(
            (
                "AWS4-HMAC-SHA256-TRAILER",
                ctx.amz_date or "",
                ctx.scope or "",
                prev,
                hashlib.sha256(canonical.encode()).hexdigest(),
            )
        )
        sig = hmac.new(ctx.signing_key, sts.encode(), hashlib.sha256).hexdigest()
        out.append(canonical.replace("\n", "\r\n").encode())
        out.append(f"x-amz-trailer-signature:{sig}\r\n".encode())
    out.append(b"\r\n")
    return b"".join(out)


@settings(max_examples=30, deadline=None)
@given(
    data=st.binary(max_size=3000),
    chunk=st.integers(1, 1000),
    cuts=st.lists(st.integers(0, 10000), max_size=8),
)
def test_signed_trailer_stream_random_splits(data: bytes, chunk: int, cuts: list[int]) -> None:
    ctx, headers = aws_request(True)
    headers = dict(headers, **{"x-amz-decoded-content-length": str(len(data))})
    crc32c = base64.b64encode(__import__("crc32c").crc32c(data).to_bytes(4, "big")).decode()
    body = sign_stream(ctx, data, chunk, [("x-amz-checksum-crc32c", crc32c)])
    bounds = sorted({0, len(body), *(c for c in cuts if c < len(body))})
    out, sums = decode(ctx, headers, [body[a:b] for a, b in zip(bounds, bounds[1:], strict=False)])
    assert out == data
    assert sums.headers() == {"x-amz-checksum-crc32c": crc32c}  # type: ignore[attr-defined]


def test_own_encoder_reproduces_aws_example() -> None:
    for trailer in (False, True):
        ctx, _ = aws_request(trailer)
        trailers = [("x-amz-checksum-crc32c", "sOO8/Q==")] if trailer else []
        assert sign_stream(ctx, AWS_DATA, 65536, trailers) == aws_body(trailer)


# ------------------------------------------------------------------ mutations (property)


def _decode_or_error(ctx: AuthContext, headers: dict[str, str], body: bytes) -> bytes | None:
    """The decoded bytes, or None when the decoder refused the body with an S3Error."""
    try:
        return decode(ctx, headers, [body])[0]
    except S3Error:
        return None


@settings(max_examples=150, deadline=None)
@given(trailer=st.booleans(), at=st.integers(0, 10**6), xor=st.integers(1, 255))
def test_any_single_byte_change_to_a_signed_stream_is_caught(
    trailer: bool, at: int, xor: int
) -> None:
    ctx, headers = aws_request(trailer)
    body = bytearray(aws_body(trailer))
    at %= len(body)
    body[at] ^= xor
    out = _decode_or_error(ctx, headers, bytes(body))
    # only a change that means the same thing may pass (e.g. hex case in a signature)
    assert out is None or out == AWS_DATA


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=300), at=st.integers(0, 10**6), xor=st.integers(1, 255))
def test_any_single_byte_change_to_a_trailer_stream_is_caught(
    data: bytes, at: int, xor: int
) -> None:
    body = bytearray(botocore_chunked(data, 64))
    at %= len(body)
    body[at] ^= xor
    out = _decode_or_error(unsigned_ctx(), trailer_headers(data), bytes(body))
    assert out is None or out == data


@settings(max_examples=150, deadline=None)
@given(
    body=st.binary(max_size=200), mode=st.sampled_from(["streaming-unsigned-trailer", "unsigned"])
)
def test_garbage_only_raises_s3_errors(body: bytes, mode: str) -> None:
    headers = trailer_headers(b"x" * 10)
    headers["content-encoding"] = "aws-chunked"
    _decode_or_error(unsigned_ctx(mode), headers, body)  # anything but S3Error fails the test


def test_unicode_digit_length_is_invalid() -> None:
    with pytest.raises(S3Error) as e:
        BodyDecoder(unsigned_ctx("unsigned"), {"content-length": "\xb2"})
    assert e.value.code == "InvalidArgument"


@pytest.mark.parametrize("size", [2047, 2048, 4096, 4097, 16 * 1024, 16 * 1024 + 1, 70_000])
def test_bodies_hashed_in_pieces_that_keep_the_gil_hash_as_one(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    headers = {
        "content-length": str(size),
        "content-md5": base64.b64encode(hashlib.md5(data).digest()).decode(),
        "x-amz-checksum-sha1": base64.b64encode(hashlib.sha1(data).digest()).decode(),
    }
    ctx = AuthContext(None, "hex", hashlib.sha256(data).hexdigest(), None, None, None, None, "v4-header")
    out, checksums = decode(ctx, headers, [data])
    assert out == data and checksums.md5_hex == hashlib.md5(data).hexdigest()  # type: ignore[attr-defined]
    # one byte changed anywhere, first piece or last, is caught
    for at in (0, size - 1):
        bad = data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]
        assert error_code(ctx, headers, bad) in ("BadDigest", "XAmzContentSHA256Mismatch")


def test_an_undeclared_trailer_is_refused_not_ignored() -> None:
    """A checksum trailer without x-amz-trailer was never checked, so a wrong one stored
    the object; now any undeclared trailer is refused."""
    body = b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"
    headers = {k: v for k, v in trailer_headers(b"hello world").items() if k != "x-amz-trailer"}
    assert error_code(unsigned_ctx(), headers, body) == "InvalidRequest"
    other = b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\nx-other:1\r\n\r\n"
    assert error_code(unsigned_ctx(), trailer_headers(b"hello world"), other) == "InvalidRequest"
