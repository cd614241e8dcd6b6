"""Request bodies: aws-chunked decoding and payload verification while the body streams.

Contract with the gateway: `feed` returns object bytes as soon as they arrive, *before* the
whole body is verified — a hex `x-amz-content-sha256`, Content-MD5, a checksum trailer and a
signed chunk's signature can only be checked once their bytes are in. So the gateway may
write what `feed` returns to storage, but must commit the object (metadata, journal) only
after `finish()` returned; if `feed` or `finish` raises, the written data is discarded.

Framing (after the HTTP server removed HTTP/1.1 chunking), per AWS "aws-chunked":

    <hex size>[;chunk-signature=<64 hex>]\\r\\n<data>\\r\\n ... 0[;chunk-signature=…]\\r\\n
    [<trailer name>:<value>\\r\\n ...][x-amz-trailer-signature:<64 hex>\\r\\n]\\r\\n

Chunk signature = HMAC(key, "AWS4-HMAC-SHA256-PAYLOAD\\n" date "\\n" scope "\\n" previous
signature "\\n" sha256("") "\\n" sha256(chunk data)), seeded with the request signature; the
trailer signature = HMAC(key, "AWS4-HMAC-SHA256-TRAILER\\n" date "\\n" scope "\\n" last chunk
signature "\\n" sha256("name:value\\n" for each trailer)). Non-final signed chunks are not
required to be ≥ 8 KiB (AWS requires it; being lenient loses no integrity).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from crossbeat.s3.auth import AuthContext, check_signature
from crossbeat.s3.checksums import (
    Hasher,
    decode_value,
    header_name,
    is_value_header,
    new_hasher,
    normalize_algorithm,
)
from crossbeat.s3.errors import S3Error

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_LINE = 4096  # a chunk header or trailer line longer than this is malformed
_HEXDIGITS = frozenset(b"0123456789abcdefABCDEF")

# parser states
_HEADER, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


@dataclass
class Checksums:
    """What `BodyDecoder.finish` computed (and verified where the client gave a value).

    `algorithm`/`value_b64` is the flexible checksum (from a header, a trailer or
    `x-amz-sdk-checksum-algorithm`), None when the client asked for none.
    """

    md5_hex: str
    algorithm: str | None
    value_b64: str | None
    size: int = 0

    def headers(self) -> dict[str, str]:
        """The response header echoing the checksum, e.g. `{"x-amz-checksum-crc32": "…"}`."""
        if self.algorithm is None or self.value_b64 is None:
            return {}
        return {header_name(self.algorithm): self.value_b64}


# hashlib releases the GIL for updates of at least this many bytes (HASHLIB_GIL_MINSIZE)
_GIL_FREE_UPDATE = 2048
# bodies up to this size are hashed in pieces that keep the GIL (see BodyDecoder._consume)
_HOLD_GIL_BYTES = 16 * 1024


class BodyDecoder:
    """Turns the raw HTTP body (after uvicorn removed HTTP chunking) into object bytes, verifying as it goes.

    `headers` are the request headers with lower-case names. The constructor validates the
    checksum headers: malformed Content-MD5 → InvalidDigest; more than one x-amz-checksum-*
    value, an unknown algorithm or a malformed value → InvalidRequest.
    `default_algorithm` (e.g. "CRC64NVME") is computed when the client names none.
    `md5=False` skips the MD5 (`Checksums.md5_hex` is then "") unless the client sent a
    Content-MD5 to verify: for bodies that need no ETag, MD5 is the costliest hash here.
    """

    decoded_length: int | None

    def __init__(
        self,
        ctx: AuthContext,
        headers: dict[str, str],
        *,
        default_algorithm: str | None = None,
        md5: bool = True,
    ) -> None:
        self._ctx = ctx
        mode = ctx.payload_mode
        encodings = {t.strip().lower() for t in headers.get("content-encoding", "").split(",")}
        self._chunked = mode.startswith("streaming") or (
            "aws-chunked" in encodings and mode in ("unsigned", "none")
        )
        self._signed = mode in ("streaming-signed", "streaming-signed-trailer")
        self._trailer_signed = mode == "streaming-signed-trailer"
        if self._signed and (ctx.signing_key is None or ctx.seed_signature is None):
            raise S3Error(
                "InvalidRequest", "Signed aws-chunked payloads need SigV4 authentication."
            )

        self._content_md5: bytes | None = None
        md5_text = headers.get("content-md5")
        if md5_text is not None:
            try:
                self._content_md5 = base64.b64decode(md5_text.strip(), validate=True)
            except (binascii.Error, ValueError):
                self._content_md5 = None
            if self._content_md5 is None or len(self._content_md5) != 16:
                raise S3Error("InvalidDigest")

        # the flexible checksum: at most one, from a header or a declared trailer
        named = [(name, value) for name, value in headers.items() if is_value_header(name)]
        trailer_names = [
            t.strip().lower() for t in headers.get("x-amz-trailer", "").split(",") if t.strip()
        ]
        if trailer_names and not self._chunked:
            raise S3Error("InvalidRequest", "x-amz-trailer needs an aws-chunked body.")
        if trailer_names and mode == "streaming-signed":
            raise S3Error(
                "InvalidRequest",
                "x-amz-trailer needs x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER.",
            )
        # a trailer the headers did not declare is refused, not ignored: a checksum in it
        # would otherwise go unverified while the client believes it was checked
        self._declared_trailers = frozenset(trailer_names)
        checksum_trailers = [t for t in trailer_names if t.startswith("x-amz-checksum-")]
        if len(named) + len(checksum_trailers) > 1:
            raise S3Error(
                "InvalidRequest",
                "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
            )
        self._expected: bytes | None = None  # the digest the client claims (header)
        self._trailer_name: str | None = None  # the trailer that will carry it
        algorithm: str | None = None
        if named:
            name, value = named[0]
            algorithm = normalize_algorithm(name[len("x-amz-checksum-") :])
            self._expected = decode_value(algorithm, value)
        elif checksum_trailers:
            self._trailer_name = checksum_trailers[0]
            algorithm = normalize_algorithm(self._trailer_name[len("x-amz-checksum-") :])
        sdk = headers.get("x-amz-sdk-checksum-algorithm")
        if sdk is not None:
            sdk_alg = normalize_algorithm(sdk)
            if algorithm is not None and sdk_alg != algorithm:
                raise S3Error(
                    "InvalidRequest",
                    "Value for x-amz-sdk-checksum-algorithm header is invalid.",
                )
            algorithm = sdk_alg
        if algorithm is None and default_algorithm is not None:
            algorithm = normalize_algorithm(default_algorithm)
        self._hasher: Hasher | None = new_hasher(algorithm) if algorithm else None

        self.decoded_length = None
        length_text = headers.get(
            "x-amz-decoded-content-length" if self._chunked else "content-length"
        )
        if length_text is not None:
            text = length_text.strip()
            if not (text.isascii() and text.isdigit()):
                raise S3Error("InvalidArgument", f"Invalid length {length_text!r}.")
            self.decoded_length = int(text)

        self._md5 = hashlib.md5() if md5 or self._content_md5 is not None else None
        self._sha256 = hashlib.sha256() if mode == "hex" else None
        self._size = 0
        # aws-chunked parser state
        self._state = _HEADER
        self._line = bytearray()
        self._remaining = 0
        self._chunk_sha: hashlib._Hash | None = None
        self._chunk_sig = ""
        self._prev_sig = ctx.seed_signature or ""
        self._trailers: list[tuple[str, str]] = []
        self._trailer_sig: str | None = None

    @property
    def size(self) -> int:
        """Object bytes decoded so far."""
        return self._size

    @property
    def algorithm(self) -> str | None:
        """The flexible checksum algorithm being computed, if any."""
        return self._hasher.algorithm if self._hasher else None

    def feed(self, raw: bytes) -> bytes:
        """Object bytes from the next piece of raw body (framing removed; may be empty).

        Raises SignatureDoesNotMatch on a bad chunk signature, InvalidRequest on broken
        framing, IncompleteBody when more bytes arrive than the declared length.
        """
        if not self._chunked:
            self._consume(raw)
            return raw
        return self._feed_chunked(raw)

    def finish(self) -> Checksums:
        """Verify the whole body; call once, after the last `feed`.

        Raises IncompleteBody (truncated framing or length mismatch), SignatureDoesNotMatch
        (trailer signature), XAmzContentSHA256Mismatch, BadDigest (Content-MD5 or checksum).
        """
        if self._chunked:
            # tolerate a body that ends right after its last trailer line's CRLF
            if self._state == _TRAILER and not self._line:
                self._end_trailer()
            if self._state != _DONE:
                raise S3Error(
                    "IncompleteBody", "The aws-chunked body ended before its final chunk."
                )
        if self.decoded_length is not None and self._size != self.decoded_length:
            raise S3Error("IncompleteBody")
        if self._sha256 is not None and self._sha256.hexdigest() != self._ctx.content_sha256:
            raise S3Error("XAmzContentSHA256Mismatch")
        md5 = self._md5.digest() if self._md5 is not None else b""
        if self._content_md5 is not None and md5 != self._content_md5:
            raise S3Error(
                "BadDigest", "The Content-MD5 you specified did not match what we received."
            )
        value_b64: str | None = None
        if self._hasher is not None:
            digest = self._hasher.digest()
            expected = self._expected
            if self._trailer_name is not None:
                given = dict(self._trailers).get(self._trailer_name)
                if given is None:
                    raise S3Error(
                        "InvalidRequest", f"The declared trailer {self._trailer_name} is missing."
                    )
                expected = decode_value(self._hasher.algorithm, given)
            if expected is not None and expected != digest:
                raise S3Error(
                    "BadDigest",
                    f"The {self._hasher.algorithm} you specified did not match the calculated checksum.",
                )
            value_b64 = base64.b64encode(digest).decode("ascii")
        return Checksums(
            md5_hex=md5.hex(),
            algorithm=self._hasher.algorithm if self._hasher else None,
            value_b64=value_b64,
            size=self._size,
        )

    # ------------------------------------------------------------ internals

    def _consume(self, data: bytes) -> None:
        pieces: list[bytes | memoryview] = [data]
        if _GIL_FREE_UPDATE <= len(data) <= _HOLD_GIL_BYTES:
            # hashlib lets go of the GIL for every update of 2048 bytes or more; on the event
            # loop, for a small body, that hand-off to another thread (and the wait to get
            # the GIL back) costs more than the hashing: feed it in pieces that keep the GIL
            view, step = memoryview(data), _GIL_FREE_UPDATE - 1
            pieces = [view[i : i + step] for i in range(0, len(data), step)]
        for hasher in (self._md5, self._sha256, self._hasher):
            if hasher is not None:
                for piece in pieces:
                    hasher.update(piece)
        self._size += len(data)
        if self.decoded_length is not None and self._size > self.decoded_length:
            raise S3Error("IncompleteBody", "The body is longer than its declared length.")

    def _feed_chunked(self, raw: bytes) -> bytes:
        out: list[bytes] = []
        pos, end = 0, len(raw)
        while pos < end:
            if self._state == _DATA:
                take = min(self._remaining, end - pos)
                piece = raw if take == end else raw[pos : pos + take]
                self._consume(piece)
                if self._chunk_sha is not None:
                    self._chunk_sha.update(piece)
                out.append(piece)
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._end_data()
                continue
            if self._state == _DONE:
                raise S3Error("InvalidRequest", "Data after the end of the aws-chunked body.")
            nl = raw.find(b"\n", pos)
            stop = end if nl < 0 else nl + 1
            self._line += raw[pos:stop]
            pos = stop
            if len(self._line) > MAX_LINE:
                raise S3Error("InvalidRequest", "Malformed aws-chunked body: line too long.")
            if nl >= 0:
                line = bytes(self._line)
                self._line.clear()
                if not line.endswith(b"\r\n"):
                    raise S3Error(
                        "InvalidRequest", "Malformed aws-chunked body: lines end with CRLF."
                    )
                self._on_line(line[:-2])
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def _on_line(self, line: bytes) -> None:
        if self._state == _HEADER:
            self._on_chunk_header(line)
        elif self._state == _DATA_END:
            if line:
                raise S3Error(
                    "InvalidRequest", "Malformed aws-chunked body: chunk longer than its size."
                )
            self._state = _HEADER
        elif self._state == _TRAILER:
            if not line:
                self._end_trailer()
                return
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise S3Error("InvalidRequest", "Malformed aws-chunked trailer.")
            name, value = name.strip().lower(), value.strip()
            if self._trailer_sig is not None:
                raise S3Error("InvalidRequest", "x-amz-trailer-signature must be the last trailer.")
            if name == "x-amz-trailer-signature":
                self._trailer_sig = value
            elif name not in self._declared_trailers:
                raise S3Error("InvalidRequest", f"The trailer {name} was not declared in x-amz-trailer.")
            else:
                self._trailers.append((name, value))

    def _on_chunk_header(self, line: bytes) -> None:
        size_hex, _, ext = line.partition(b";")
        size_hex = size_hex.strip()
        if not size_hex or len(size_hex) > 16 or not _HEXDIGITS.issuperset(size_hex):
            raise S3Error("InvalidRequest", "Malformed aws-chunked body: bad chunk size.")
        size = int(size_hex, 16)
        if self._signed:
            key, _, sig = ext.decode("latin-1").partition("=")
            if key.strip() != "chunk-signature" or not sig.strip():
                raise S3Error(
                    "SignatureDoesNotMatch", "A signed aws-chunked chunk has no chunk-signature."
                )
            self._chunk_sig = sig.strip().lower()
            self._chunk_sha = hashlib.sha256()
        if size == 0:
            if self._signed:
                self._verify_chunk()
            self._state = _TRAILER
        else:
            self._remaining = size
            self._state = _DATA

    def _end_data(self) -> None:
        if self._signed:
            self._verify_chunk()
        self._state = _DATA_END

    def _verify_chunk(self) -> None:
        assert self._chunk_sha is not None
        ctx = self._ctx
        string_to_sign = "\n".join(
            (
                "AWS4-HMAC-SHA256-PAYLOAD",
                ctx.amz_date or "",
                ctx.scope or "",
                self._prev_sig,
                EMPTY_SHA256,
                self._chunk_sha.hexdigest(),
            )
        )
        self._check_sig(string_to_sign, self._chunk_sig)
        self._prev_sig = self._chunk_sig
        self._chunk_sha = None

    def _end_trailer(self) -> None:
        if self._trailers and self._ctx.payload_mode == "streaming-signed":
            # the chunk signatures do not cover trailers: refuse unsigned extra data
            raise S3Error("InvalidRequest", "Trailers need a -TRAILER x-amz-content-sha256 mode.")
        if self._trailer_signed:
            if self._trailer_sig is None:
                raise S3Error("SignatureDoesNotMatch", "The aws-chunked trailer is not signed.")
            canonical = "".join(f"{n}:{v}\n" for n, v in self._trailers).encode("latin-1")
            ctx = self._ctx
            string_to_sign = "\n".join(
                (
                    "AWS4-HMAC-SHA256-TRAILER",
                    ctx.amz_date or "",
                    ctx.scope or "",
                    self._prev_sig,
                    hashlib.sha256(canonical).hexdigest(),
                )
            )
            self._check_sig(string_to_sign, self._trailer_sig.lower())
        self._state = _DONE

    def _check_sig(self, string_to_sign: str, given: str) -> None:
        key = self._ctx.signing_key
        assert key is not None
        check_signature(key, string_to_sign, given)
