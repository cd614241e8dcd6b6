"""Flexible checksums against botocore's own implementations, and multipart combination."""

from __future__ import annotations

import base64
import hashlib

import pytest
from botocore.httpchecksum import (
    Crc32Checksum,
    CrtCrc32cChecksum,
    CrtCrc64NvmeChecksum,
    CrtXxhash3Checksum,
    CrtXxhash64Checksum,
    CrtXxhash128Checksum,
    Sha1Checksum,
    Sha256Checksum,
    Sha512Checksum,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from crossbeat.s3.checksums import (
    ALGORITHMS,
    COMPOSITE,
    FULL_OBJECT,
    combine_parts,
    decode_value,
    header_name,
    new_hasher,
    upload_checksum,
)
from crossbeat.s3.errors import S3Error

BOTOCORE = {
    "CRC32": Crc32Checksum,
    "CRC32C": CrtCrc32cChecksum,
    "CRC64NVME": CrtCrc64NvmeChecksum,
    "SHA1": Sha1Checksum,
    "SHA256": Sha256Checksum,
    "SHA512": Sha512Checksum,
    "XXHASH64": CrtXxhash64Checksum,
    "XXHASH3": CrtXxhash3Checksum,
    "XXHASH128": CrtXxhash128Checksum,
}


class _Md5Checksum:
    def __init__(self) -> None:
        self._h = hashlib.md5()

    def update(self, data: bytes) -> None:
        self._h.update(data)

    def b64digest(self) -> str:
        return base64.b64encode(self._h.digest()).decode()


BOTOCORE["MD5"] = _Md5Checksum  # botocore has no MD5 flexible checksum


def botocore_b64(algorithm: str, data: bytes) -> str:
    c = BOTOCORE[algorithm]()
    c.update(data)
    return str(c.b64digest())


# values seen on the wire (captures) and in the AWS docs
KNOWN = [
    ("CRC32", b"hello world", "DUoRhQ=="),
    ("CRC32", b"", "AAAAAA=="),
    ("CRC64NVME", b"hello world", "jSnVw/bqjr4="),
    ("CRC32", b"a" * 5242880, "r/zBbw=="),
    ("CRC32", b"a" * 10, "TBHN8A=="),
    ("CRC32C", b"a" * 66560, "sOO8/Q=="),
]


@pytest.mark.parametrize(("algorithm", "data", "expected"), KNOWN)
def test_known_values(algorithm: str, data: bytes, expected: str) -> None:
    h = new_hasher(algorithm)
    h.update(data)
    assert h.b64() == expected


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_empty_and_lower_case_name(algorithm: str) -> None:
    h = new_hasher(algorithm.lower())
    assert h.algorithm == algorithm
    assert h.b64() == botocore_b64(algorithm, b"")
    assert header_name(algorithm) == "x-amz-checksum-" + algorithm.lower()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(0, 3000), max_size=5))
def test_streaming_matches_botocore(algorithm: str, data: bytes, cuts: list[int]) -> None:
    h = new_hasher(algorithm)
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    for a, b in zip(bounds, bounds[1:], strict=False):
        h.update(memoryview(data)[a:b])
    assert h.b64() == botocore_b64(algorithm, data)
    assert h.digest() == base64.b64decode(botocore_b64(algorithm, data))


def test_unknown_algorithm_is_invalid_request() -> None:
    with pytest.raises(S3Error) as e:
        new_hasher("CRC16")
    assert e.value.code == "InvalidRequest"


@pytest.mark.parametrize("value", ["", "AAAA", "not base64!", "AAAAAAAA"])
def test_malformed_value_is_invalid_request(value: str) -> None:
    with pytest.raises(S3Error) as e:
        decode_value("CRC32", value)
    assert e.value.code == "InvalidRequest"


def _parts(algorithm: str, sizes: list[int]) -> tuple[list[bytes], list[str]]:
    datas = [bytes([65 + i]) * n for i, n in enumerate(sizes)]
    return datas, [botocore_b64(algorithm, d) for d in datas]


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME"])
@pytest.mark.parametrize("sizes", [[5], [5 << 20, 10], [7, 0, 1000, 3]])
def test_full_object_equals_checksum_of_whole_object(algorithm: str, sizes: list[int]) -> None:
    datas, values = _parts(algorithm, sizes)
    value, kind = combine_parts(algorithm, values, sizes, FULL_OBJECT)
    assert kind == FULL_OBJECT
    assert value == botocore_b64(algorithm, b"".join(datas))


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "CRC64NVME"])
def test_composite_is_hash_of_part_digests(algorithm: str) -> None:
    sizes = [100, 200, 3]
    _datas, values = _parts(algorithm, sizes)
    value, kind = combine_parts(algorithm, values, sizes)
    assert kind == COMPOSITE
    concatenated = b"".join(base64.b64decode(v) for v in values)
    assert value == botocore_b64(algorithm, concatenated) + "-3"


def test_composite_of_captured_multipart_upload() -> None:
    # boto3's upload_fileobj: parts r/zBbw== (5 MiB of 'a') and TBHN8A== (10 'a's)
    value, kind = combine_parts("CRC32", ["r/zBbw==", "TBHN8A=="], [5242880, 10])
    expected = botocore_b64("CRC32", base64.b64decode("r/zBbw==") + base64.b64decode("TBHN8A=="))
    assert (value, kind) == (expected + "-2", COMPOSITE)


def test_crc64nvme_defaults_to_full_object() -> None:
    datas, values = _parts("CRC64NVME", [10, 20])
    assert combine_parts("CRC64NVME", values, [10, 20]) == (
        botocore_b64("CRC64NVME", b"".join(datas)),
        FULL_OBJECT,
    )


@pytest.mark.parametrize(
    ("algorithm", "kind"),
    [("SHA256", FULL_OBJECT), ("SHA1", FULL_OBJECT), ("CRC64NVME", COMPOSITE)],
)
def test_unsupported_combination_is_invalid_request(algorithm: str, kind: str) -> None:
    _datas, values = _parts(algorithm, [1, 2])
    with pytest.raises(S3Error) as e:
        combine_parts(algorithm, values, [1, 2], kind)
    assert e.value.code == "InvalidRequest"


@pytest.mark.parametrize(
    ("algorithm", "kind", "expected"),
    [
        (None, None, (None, None)),
        ("", "", (None, None)),
        ("crc32", None, ("CRC32", COMPOSITE)),
        ("CRC32", "", ("CRC32", COMPOSITE)),
        ("CRC32", "full_object", ("CRC32", FULL_OBJECT)),
        ("CRC64NVME", None, ("CRC64NVME", FULL_OBJECT)),
        ("SHA256", "COMPOSITE", ("SHA256", COMPOSITE)),
        ("XXHASH128", None, ("XXHASH128", COMPOSITE)),
    ],
)
def test_an_upload_gets_the_type_asked_for_else_its_algorithms_default(
    algorithm: str | None, kind: str | None, expected: tuple[str | None, str | None]
) -> None:
    assert upload_checksum(algorithm, kind) == expected


@pytest.mark.parametrize(
    ("algorithm", "kind", "message"),
    [
        ("CRC64NVME", "COMPOSITE", "The COMPOSITE checksum type cannot be used with the crc64nvme checksum algorithm."),
        ("SHA1", "FULL_OBJECT", "The FULL_OBJECT checksum type cannot be used with the sha1 checksum algorithm."),
        ("SHA512", "FULL_OBJECT", "The FULL_OBJECT checksum type cannot be used with the sha512 checksum algorithm."),
        ("XXHASH3", "FULL_OBJECT", "The FULL_OBJECT checksum type cannot be used with the xxhash3 checksum algorithm."),
        ("CRC32", "BOGUS", "Value for x-amz-checksum-type header is invalid."),
        (None, "COMPOSITE", "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."),
        ("CRC16", None, "Checksum algorithm 'CRC16' is not supported."),
    ],
)
def test_an_upload_is_refused_what_s3_refuses(algorithm: str | None, kind: str | None, message: str) -> None:
    """S3's InvalidRequest and its words, at CreateMultipartUpload."""
    with pytest.raises(S3Error) as e:
        upload_checksum(algorithm, kind)
    assert (e.value.code, e.value.message) == ("InvalidRequest", message)


def test_a_combination_refused_at_create_is_refused_in_the_same_words_at_complete() -> None:
    _datas, values = _parts("SHA256", [1, 2])
    with pytest.raises(S3Error) as e:
        combine_parts("SHA256", values, [1, 2], FULL_OBJECT)
    assert e.value.message == "The FULL_OBJECT checksum type cannot be used with the sha256 checksum algorithm."
