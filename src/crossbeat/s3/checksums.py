"""S3 flexible checksums: CRC32, CRC32C, CRC64NVME, SHA1, SHA256 (and SHA512, MD5, XXHASH*).

A checksum value on the wire (`x-amz-checksum-<alg>` header or trailer, `<ChecksumCRC32>` in
XML) is the base64 of the big-endian digest. `new_hasher` gives a streaming hasher;
`upload_checksum` checks the algorithm and type a multipart upload is created with;
`combine_parts` gives a multipart upload's object checksum from its parts' checksums.

Implementations: `zlib.crc32`, the `crc32c` package (hardware CRC32C),
`awscrt.checksums.crc64nvme` and its `combine_*` functions (full-object CRC combination
without re-reading the data), and hashlib.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from typing import Protocol

import crc32c as _crc32c
from awscrt import checksums as _crt

from crossbeat.s3.errors import S3Error

# the classic five, then the ones botocore ≥ 1.40 also offers (S3's ChecksumAlgorithm enum)
ALGORITHMS = (
    "CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256",
    "SHA512", "MD5", "XXHASH64", "XXHASH3", "XXHASH128",
)  # fmt: skip

# digest length in bytes, per algorithm
DIGEST_SIZES: dict[str, int] = {
    "CRC32": 4, "CRC32C": 4, "CRC64NVME": 8, "SHA1": 20, "SHA256": 32,
    "SHA512": 64, "MD5": 16, "XXHASH64": 8, "XXHASH3": 8, "XXHASH128": 16,
}  # fmt: skip

COMPOSITE = "COMPOSITE"
FULL_OBJECT = "FULL_OBJECT"
CHECKSUM_TYPES = (COMPOSITE, FULL_OBJECT)

# checksum header names that are not checksum values
NON_VALUE_HEADERS = frozenset(
    {"x-amz-checksum-algorithm", "x-amz-checksum-mode", "x-amz-checksum-type"}
)


def is_value_header(name: str) -> bool:
    """Whether the (lower-case) header `name` carries a checksum value: `x-amz-checksum-crc32`
    does, `x-amz-checksum-type` does not."""
    return name.startswith("x-amz-checksum-") and name not in NON_VALUE_HEADERS


class Hasher(Protocol):
    """A streaming checksum: `update` with data, then `digest` (big-endian bytes) or `b64`."""

    algorithm: str

    def update(self, data: bytes | bytearray | memoryview) -> None: ...

    def digest(self) -> bytes: ...

    def b64(self) -> str: ...


class _CrcHasher:
    """A CRC kept as an int; `_fn(data, previous)` continues it."""

    __slots__ = ("algorithm", "_fn", "_size", "_value")

    def __init__(self, algorithm: str, fn: _CrcFn, size: int) -> None:
        self.algorithm = algorithm
        self._fn = fn
        self._size = size
        self._value = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._value = self._fn(data, self._value)

    def digest(self) -> bytes:
        return self._value.to_bytes(self._size, "big")

    def b64(self) -> str:
        return base64.b64encode(self.digest()).decode("ascii")


class _HashlibHasher:
    __slots__ = ("algorithm", "_h")

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self._h = hashlib.new(algorithm.lower())

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._h.update(data)

    def digest(self) -> bytes:
        return self._h.digest()

    def b64(self) -> str:
        return base64.b64encode(self._h.digest()).decode("ascii")


class _XxHasher:
    """awscrt's XXHash; its digest is final, so it is computed once and kept."""

    __slots__ = ("algorithm", "_h", "_digest")

    _FACTORIES = {
        "XXHASH64": _crt.XXHash.new_xxhash64,
        "XXHASH3": _crt.XXHash.new_xxhash3_64,
        "XXHASH128": _crt.XXHash.new_xxhash3_128,
    }

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self._h = self._FACTORIES[algorithm]()
        self._digest: bytes | None = None

    def update(self, data: bytes | bytearray | memoryview) -> None:
        if self._digest is not None:
            raise ValueError("update after digest")
        # awscrt's XXHash takes only read-only buffers
        self._h.update(data if isinstance(data, bytes) else bytes(data))

    def digest(self) -> bytes:
        if self._digest is None:
            self._digest = bytes(self._h.finalize())
        return self._digest

    def b64(self) -> str:
        return base64.b64encode(self.digest()).decode("ascii")


class _CrcFn(Protocol):
    def __call__(self, data: bytes | bytearray | memoryview, previous: int, /) -> int: ...


def _crc32(data: bytes | bytearray | memoryview, previous: int) -> int:
    return zlib.crc32(data, previous)


def _crc32c_fn(data: bytes | bytearray | memoryview, previous: int) -> int:
    return _crc32c.crc32c(data, previous)


def _crc64nvme(data: bytes | bytearray | memoryview, previous: int) -> int:
    return _crt.crc64nvme(data, previous)


_CRC_FUNCTIONS: dict[str, _CrcFn] = {"CRC32": _crc32, "CRC32C": _crc32c_fn, "CRC64NVME": _crc64nvme}


def normalize_algorithm(name: str) -> str:
    """`crc32` / `CRC32` → `CRC32`; an unknown algorithm is S3 `InvalidRequest`."""
    upper = name.strip().upper()
    if upper not in DIGEST_SIZES:
        raise S3Error("InvalidRequest", f"Checksum algorithm {name!r} is not supported.")
    return upper


def new_hasher(algorithm: str) -> Hasher:
    """A fresh streaming hasher for `algorithm` (any case of a name in `ALGORITHMS`)."""
    alg = normalize_algorithm(algorithm)
    fn = _CRC_FUNCTIONS.get(alg)
    if fn is not None:
        return _CrcHasher(alg, fn, DIGEST_SIZES[alg])
    if alg.startswith("XXHASH"):
        return _XxHasher(alg)
    return _HashlibHasher(alg)


def header_name(algorithm: str) -> str:
    """`CRC32` → `x-amz-checksum-crc32`."""
    return "x-amz-checksum-" + algorithm.lower()


def decode_value(algorithm: str, value_b64: str) -> bytes:
    """The digest bytes of a wire checksum value; malformed or wrong length → `InvalidRequest`."""
    alg = normalize_algorithm(algorithm)
    try:
        raw = base64.b64decode(value_b64.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != DIGEST_SIZES[alg]:
        raise S3Error("InvalidRequest", f"Value for {header_name(alg)} header is invalid.")
    return raw


def default_type(algorithm: str) -> str:
    """The type of a multipart object's checksum when its upload named none: FULL_OBJECT for
    CRC64NVME (the only one it can have), COMPOSITE for the others."""
    return FULL_OBJECT if normalize_algorithm(algorithm) == "CRC64NVME" else COMPOSITE


def check_type(algorithm: str, checksum_type: str) -> None:
    """InvalidRequest, in S3's words, unless a multipart object's checksum of `algorithm`
    can be of `checksum_type` (both normalized): FULL_OBJECT only for the CRCs (only they
    combine from their parts' values), COMPOSITE for all but CRC64NVME."""
    if checksum_type not in CHECKSUM_TYPES:
        raise S3Error("InvalidRequest", "Value for x-amz-checksum-type header is invalid.")
    if checksum_type == FULL_OBJECT:
        possible = algorithm in _CRC_FUNCTIONS
    else:
        possible = algorithm != "CRC64NVME"
    if not possible:
        raise S3Error(
            "InvalidRequest",
            f"The {checksum_type} checksum type cannot be used with the {algorithm.lower()} checksum algorithm.",
        )


def upload_checksum(algorithm: str | None, checksum_type: str | None) -> tuple[str | None, str | None]:
    """CreateMultipartUpload's `x-amz-checksum-algorithm` and `x-amz-checksum-type` (None or
    "" when not sent, any case) → the upload's `(algorithm, type)`, the type defaulted
    (`default_type`); `(None, None)` when neither is sent.

    Refused there with S3's InvalidRequest, not at Complete once every part was sent: an
    unknown algorithm or type, a type without an algorithm, a type the algorithm cannot
    have (`check_type`)."""
    kind = (checksum_type or "").strip().upper() or None
    if kind is not None and kind not in CHECKSUM_TYPES:
        raise S3Error("InvalidRequest", "Value for x-amz-checksum-type header is invalid.")
    if not algorithm:
        if kind is not None:
            raise S3Error(
                "InvalidRequest",
                "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header.",
            )
        return None, None
    alg = normalize_algorithm(algorithm)
    kind = kind or default_type(alg)
    check_type(alg, kind)
    return alg, kind


def combine_parts(
    algorithm: str,
    part_values_b64: list[str],
    part_sizes: list[int],
    checksum_type: str | None = None,
) -> tuple[str, str]:
    """The object checksum of a multipart upload from its parts' checksums, in part order.

    Returns `(value, checksum_type)`:
    - `COMPOSITE` (default for all but CRC64NVME): the algorithm applied to the
      concatenated part digests, base64, then `-N` (N = number of parts) — what S3 returns.
    - `FULL_OBJECT` (default and only choice for CRC64NVME; allowed for the CRCs): the CRC of
      the whole object, combined from part CRCs and part sizes with awscrt's `combine_*`
      (zlib-style crc_combine; no data is re-read). No `-N` suffix.
    A type the algorithm does not support is `InvalidRequest` (see `check_type`).
    """
    alg = normalize_algorithm(algorithm)
    checksum_type = checksum_type.upper() if checksum_type else default_type(alg)
    check_type(alg, checksum_type)
    if len(part_values_b64) != len(part_sizes):
        raise ValueError("part_values_b64 and part_sizes differ in length")
    digests = [decode_value(alg, v) for v in part_values_b64]
    if checksum_type == COMPOSITE:
        hasher = new_hasher(alg)
        for d in digests:
            hasher.update(d)
        return f"{hasher.b64()}-{len(digests)}", COMPOSITE
    combine = {
        "CRC32": _crt.combine_crc32,
        "CRC32C": _crt.combine_crc32c,
        "CRC64NVME": _crt.combine_crc64nvme,
    }[alg]
    crc = 0
    for i, (d, size) in enumerate(zip(digests, part_sizes, strict=True)):
        value = int.from_bytes(d, "big")
        crc = value if i == 0 else combine(crc, value, size)
    return base64.b64encode(crc.to_bytes(DIGEST_SIZES[alg], "big")).decode("ascii"), FULL_OBJECT
