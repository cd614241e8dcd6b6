"""S3 request authentication: SigV4 (header and presigned) and SigV2 (header and presigned).

`authenticate` checks who sent a request from its method, raw path, query string and headers,
before any body is read, and says how the body is signed (`AuthContext.payload_mode`). The
body itself is verified by `crossbeat.s3.body.BodyDecoder` as it streams: a hex
`x-amz-content-sha256` and chunk signatures can only be checked once the bytes arrive, so the
gateway must not commit an object until `BodyDecoder.finish()` has returned.

Canonicalisation follows what real clients sign (see the S3 protocol notes): the URI is the
raw path percent-decoded once and re-encoded (every byte but `A-Za-z0-9-_.~/`); the query is
decoded with `unquote` and re-encoded; signed headers are trimmed and whitespace-collapsed.
Any region in the credential scope is accepted. A request with no auth information at all
returns an `AuthContext` whose `principal` is None: refusing it is the caller's decision.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import quote, unquote_to_bytes

from crossbeat.s3.errors import S3Error

ALGORITHM_V4 = "AWS4-HMAC-SHA256"
ALGORITHM_V4A = "AWS4-ECDSA-P256-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
MAX_SKEW = timedelta(minutes=15)
MAX_PRESIGNED_EXPIRES = 604800  # seven days, the SigV4 limit

# x-amz-content-sha256 value -> payload mode
PAYLOAD_MODES: dict[str, str] = {
    UNSIGNED_PAYLOAD: "unsigned",
    "STREAMING-UNSIGNED-PAYLOAD-TRAILER": "streaming-unsigned-trailer",
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD": "streaming-signed",
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER": "streaming-signed-trailer",
}
_V4A_PAYLOADS = (
    "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
    "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER",
)
_HEX64 = re.compile(r"[0-9a-fA-F]{64}\Z")
_PLAIN_PATH = re.compile(rb"[A-Za-z0-9\-._~/]*")
_AMZ_DATE = "%Y%m%dT%H%M%SZ"

# SigV2: the query parameters that are part of the canonical resource, as S3 signs them
_V2_SUBRESOURCES = frozenset(
    {
        "accelerate", "acl", "analytics", "cors", "delete", "encryption", "inventory",
        "lifecycle", "location", "logging", "metrics", "notification", "object-lock",
        "partNumber", "policy", "publicAccessBlock", "replication", "requestPayment",
        "restore", "retention", "legal-hold", "select", "select-type", "tagging", "torrent",
        "uploadId", "uploads", "versionId", "versioning", "versions", "website",
        "response-cache-control", "response-content-disposition", "response-content-encoding",
        "response-content-language", "response-content-type", "response-expires",
    }
)  # fmt: skip
# ...and as botocore's SigV2 signer signs them (HmacV1Auth.QSAOfInterest): without
# encryption, publicAccessBlock, retention and legal-hold, with two S3 has no use for. s3cmd
# signs a subset of this list and sends none of the rest, so this form is s3cmd's too.
_V2_SUBRESOURCES_BOTOCORE = frozenset(
    {
        "accelerate", "acl", "analytics", "cors", "defaultObjectAcl", "delete", "inventory",
        "lifecycle", "location", "logging", "metrics", "notification", "object-lock",
        "partNumber", "policy", "replication", "requestPayment", "restore", "select",
        "select-type", "storageClass", "tagging", "torrent", "uploadId", "uploads",
        "versionId", "versioning", "versions", "website",
        "response-cache-control", "response-content-disposition", "response-content-encoding",
        "response-content-language", "response-content-type", "response-expires",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Principal:
    """A user known to the gateway."""

    access_key: str
    secret_key: str
    display_name: str
    is_admin: bool = False


@dataclass
class AuthContext:
    """Who sent a request and how its body is signed.

    `payload_mode` is one of `hex` (body must hash to `content_sha256`), `unsigned`,
    `streaming-signed`, `streaming-signed-trailer`, `streaming-unsigned-trailer` (aws-chunked
    bodies) or `none` (no payload claim: SigV2, anonymous). `signing_key`, `scope`, `amz_date`
    and `seed_signature` are set for SigV4 and let the body decoder check chunk signatures.
    `auth_type` is `v4-header`, `v4-query`, `v2-header`, `v2-query` or `anonymous`.
    """

    principal: Principal | None
    payload_mode: str
    content_sha256: str | None
    signing_key: bytes | None
    scope: str | None
    amz_date: str | None
    seed_signature: str | None
    auth_type: str = "anonymous"
    region: str | None = None


Lookup = Callable[[str], "Principal | None"]


def authenticate(
    method: str,
    raw_path: bytes,
    query_string: bytes,
    headers: list[tuple[bytes, bytes]],
    lookup: Lookup,
    now: datetime | None = None,
    header_map: dict[str, list[str]] | None = None,
    v2_path: bytes | None = None,
) -> AuthContext:
    """Authenticate one request (ASGI `raw_path`, `query_string`, `headers`).

    `header_map` (lower-cased name → values in arrival order, latin-1 decoded), when the
    caller already has it, saves decoding `headers` again. `v2_path` is the path SigV2 signs
    when it is not `raw_path`: `/bucket/key` for a virtual-hosted request, whose bucket is
    in the Host header (SigV4 signs the path as sent).

    Raises `S3Error`: AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId,
    RequestTimeTooSkewed, AuthorizationHeaderMalformed, AuthorizationQueryParametersError,
    InvalidArgument, InvalidRequest, InvalidToken (a session token: none is issued here),
    NotImplemented (SigV4a). Changes nothing.
    """
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)  # a naive `now` is taken as UTC
    hdrs = _header_map(headers) if header_map is None else header_map
    query = _parse_query(query_string)
    qnames = {name for name, _ in query}
    authorization = _one(hdrs, "authorization")
    if authorization is not None and not authorization.strip():
        authorization = None  # an empty Authorization is no credentials: anonymous, as AWS takes it
    has_v4_query = b"X-Amz-Algorithm" in qnames
    has_v2_query = b"Signature" in qnames and b"AWSAccessKeyId" in qnames
    if sum((authorization is not None, has_v4_query, has_v2_query)) > 1:
        raise S3Error(
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
            "Signature query string parameter or the Authorization header should be specified",
        )
    if _one(hdrs, "x-amz-security-token") or b"X-Amz-Security-Token" in qnames:
        # session credentials (STS) are not issued here: no token is valid. Ignoring it
        # told a client using temporary credentials that its token was fine.
        raise S3Error("InvalidToken")
    if authorization is not None:
        if authorization.startswith(ALGORITHM_V4 + " "):
            return _v4_header(method, raw_path, query, hdrs, authorization, lookup, now)
        if authorization.startswith(ALGORITHM_V4A):
            raise S3Error("NotImplemented", "SigV4a (AWS4-ECDSA-P256-SHA256) is not supported.")
        if authorization.startswith("AWS "):
            return _v2_header(method, v2_path or raw_path, query, hdrs, authorization, lookup, now)
        # AWS's answer for a scheme it does not know (Bearer, Basic...)
        raise S3Error("InvalidArgument", "Unsupported Authorization Type",
                      extra={"ArgumentName": "Authorization", "ArgumentValue": authorization[:64]})
    if has_v4_query:
        return _v4_query(method, raw_path, query, hdrs, lookup, now)
    if has_v2_query:
        return _v2_query(method, v2_path or raw_path, query, hdrs, lookup, now)
    mode, sha = _payload_mode(_one(hdrs, "x-amz-content-sha256"), default="none")
    return AuthContext(None, mode, sha, None, None, None, None)


# ---------------------------------------------------------------- SigV4


def signing_key(secret_key: str, date: str, region: str, service: str = "s3") -> bytes:
    """The SigV4 signing key: HMAC chain over date, region, service, `aws4_request`."""
    return _signing_key(secret_key, date, region, service)


@functools.lru_cache(maxsize=1024)
def _signing_key(secret_key: str, date: str, region: str, service: str) -> bytes:
    k = hmac_sha256(("AWS4" + secret_key).encode("utf-8"), date.encode("ascii"))
    k = hmac_sha256(k, region.encode("utf-8"))
    k = hmac_sha256(k, service.encode("utf-8"))
    return hmac_sha256(k, b"aws4_request")


def canonical_uri(raw_path: bytes) -> str:
    """Percent-decode the raw path once, then encode every byte but `A-Za-z0-9-_.~/`."""
    if _PLAIN_PATH.fullmatch(raw_path):
        return raw_path.decode("ascii")  # nothing to decode or encode
    return quote(unquote_to_bytes(raw_path), safe="/")


def canonical_query(query: list[tuple[bytes, bytes]], drop: bytes | None = None) -> str:
    """Decoded with `unquote` (not `+` → space), re-encoded (also `/`), sorted by name, value."""
    if not query:
        return ""
    pairs = sorted(
        (quote(unquote_to_bytes(n), safe=""), quote(unquote_to_bytes(v), safe=""))
        for n, v in query
        if n != drop
    )
    return "&".join(f"{n}={v}" for n, v in pairs)


def _v4_header(
    method: str,
    raw_path: bytes,
    query: list[tuple[bytes, bytes]],
    hdrs: dict[str, list[str]],
    authorization: str,
    lookup: Lookup,
    now: datetime,
) -> AuthContext:
    fields: dict[str, str] = {}
    for part in authorization[len(ALGORITHM_V4) :].split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise S3Error(
                "AuthorizationHeaderMalformed",
                f"Malformed Authorization component {part.strip()!r}.",
            )
        fields[name.strip()] = value.strip()
    try:
        credential, signed, signature = (
            fields["Credential"], fields["SignedHeaders"], fields["Signature"]
        )  # fmt: skip
    except KeyError as missing:
        raise S3Error(
            "AuthorizationHeaderMalformed",
            f"The authorization header is missing {missing.args[0]}.",
        ) from None
    access_key, date, region = _parse_credential(credential, "AuthorizationHeaderMalformed")
    # the client's order is kept: it is the order it signed in (normally sorted)
    signed_headers = signed.lower().split(";")
    if "host" not in signed_headers:
        raise S3Error("AuthorizationHeaderMalformed", "SignedHeaders must include host.")
    amz_date = _one(hdrs, "x-amz-date")
    if amz_date is not None:
        when = _parse_amz_date(amz_date, "AccessDenied")
    else:
        http_date = _one(hdrs, "date")
        if http_date is None:
            raise S3Error(
                "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
            )
        when = _parse_http_date(http_date)
        amz_date = when.strftime(_AMZ_DATE)
    if amz_date[:8] != date:
        raise S3Error(
            "AuthorizationHeaderMalformed",
            f"Invalid credential date {date!r}. Date is not the same as X-Amz-Date: {amz_date[:8]!r}.",
        )
    sha_header = _one(hdrs, "x-amz-content-sha256")
    if sha_header is None:
        if _has_body(hdrs):
            raise S3Error(
                "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
            )
        sha_header = EMPTY_SHA256
    mode, sha = _payload_mode(sha_header, default="hex")
    _refuse_unsigned(hdrs, signed_headers)
    principal = _lookup(lookup, access_key)
    _check_skew(when, now)
    key, scope = _verify_request(
        principal, date, region, amz_date, signature,
        (method, canonical_uri(raw_path), canonical_query(query),
         _canonical_headers(hdrs, signed_headers), signed, sha_header),
    )
    return AuthContext(
        principal,
        mode,
        sha,
        key,
        scope,
        amz_date,
        signature.lower(),
        auth_type="v4-header",
        region=region,
    )


def _v4_query(
    method: str,
    raw_path: bytes,
    query: list[tuple[bytes, bytes]],
    hdrs: dict[str, list[str]],
    lookup: Lookup,
    now: datetime,
) -> AuthContext:
    params: dict[bytes, str] = {}
    for n, v in query:
        if n.startswith(b"X-Amz-"):
            params[n] = unquote_to_bytes(v).decode("utf-8", "replace")
    algorithm = params.get(b"X-Amz-Algorithm")
    if algorithm == ALGORITHM_V4A:
        raise S3Error("NotImplemented", "SigV4a (AWS4-ECDSA-P256-SHA256) is not supported.")
    if algorithm != ALGORITHM_V4:
        raise S3Error(
            "AuthorizationQueryParametersError", 'X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"'
        )
    try:
        credential = params[b"X-Amz-Credential"]
        amz_date = params[b"X-Amz-Date"]
        expires_text = params[b"X-Amz-Expires"]
        signed = params[b"X-Amz-SignedHeaders"]
        signature = params[b"X-Amz-Signature"]
    except KeyError as missing:
        raise S3Error(
            "AuthorizationQueryParametersError",
            f"Query-string authentication version 4 requires {missing.args[0].decode()}.",
        ) from None
    access_key, date, region = _parse_credential(credential, "AuthorizationQueryParametersError")
    when = _parse_amz_date(amz_date, "AuthorizationQueryParametersError")
    if amz_date[:8] != date:
        raise S3Error(
            "AuthorizationQueryParametersError", "Credential date does not match X-Amz-Date."
        )
    if expires_text[:1] == "-" and expires_text[1:].isascii() and expires_text[1:].isdigit():
        raise S3Error("AuthorizationQueryParametersError", "X-Amz-Expires must be non-negative")
    if not (expires_text.isascii() and expires_text.isdigit()):
        raise S3Error("AuthorizationQueryParametersError", "X-Amz-Expires should be a number")
    expires = int(expires_text)
    if expires > MAX_PRESIGNED_EXPIRES:
        raise S3Error(
            "AuthorizationQueryParametersError",
            "X-Amz-Expires must be less than a week (in seconds); that is, the given X-Amz-Expires "
            "must be less than 604800 seconds",
        )
    # the client's order is kept: it is the order it signed in (normally sorted)
    signed_headers = signed.lower().split(";")
    if "host" not in signed_headers:
        raise S3Error("AuthorizationQueryParametersError", "X-Amz-SignedHeaders must include host.")
    # As with header auth: an x-amz-* header the URL's signer did not sign is refused. The
    # holder of a presigned PUT could otherwise add x-amz-copy-source and copy any object
    # the signer can read into the key, or set metadata and tags the signer never approved.
    _refuse_unsigned(hdrs, signed_headers)
    principal = _lookup(lookup, access_key)
    if now > when + timedelta(seconds=expires):
        raise S3Error("AccessDenied", "Request has expired")
    if when - now > MAX_SKEW:
        raise S3Error("AccessDenied", "Request is not yet valid")
    # a presigned URL may still carry a signed x-amz-content-sha256 header
    sha_header = (
        _one(hdrs, "x-amz-content-sha256") if "x-amz-content-sha256" in signed_headers else None
    )
    payload_hash = sha_header if sha_header is not None else UNSIGNED_PAYLOAD
    mode, sha = _payload_mode(payload_hash, default="unsigned")
    key, scope = _verify_request(
        principal, date, region, amz_date, signature,
        (method, canonical_uri(raw_path), canonical_query(query, drop=b"X-Amz-Signature"),
         _canonical_headers(hdrs, signed_headers), signed, payload_hash),
    )
    return AuthContext(
        principal,
        mode,
        sha,
        key,
        scope,
        amz_date,
        signature.lower(),
        auth_type="v4-query",
        region=region,
    )


def _refuse_unsigned(hdrs: dict[str, list[str]], signed_headers: list[str]) -> None:
    """AccessDenied, as AWS answers, for any x-amz-* header the signature does not cover."""
    unsigned = sorted(h for h in hdrs if h.startswith("x-amz-") and h not in signed_headers)
    if unsigned:
        raise S3Error(
            "AccessDenied",
            "There were headers present in the request which were not signed: "
            + ", ".join(unsigned),
            extra={"HeadersNotSigned": ", ".join(unsigned)},
        )


def _verify_request(
    principal: Principal, date: str, region: str, amz_date: str, signature: str,
    canonical_parts: tuple[str, ...],
) -> tuple[bytes, str]:
    """Check a SigV4 signature over the canonical request; returns (signing key, scope)."""
    scope = f"{date}/{region}/s3/aws4_request"
    key = signing_key(principal.secret_key, date, region)
    _verify_v4(key, amz_date, scope, "\n".join(canonical_parts), signature)
    return key, scope


def _verify_v4(key: bytes, amz_date: str, scope: str, creq: str, signature: str) -> None:
    string_to_sign = "\n".join(
        (ALGORITHM_V4, amz_date, scope, hashlib.sha256(creq.encode("utf-8")).hexdigest())
    )
    check_signature(key, string_to_sign, signature.lower())


def parse_credential(credential: str, code: str) -> tuple[str, str, str]:
    """(access key, yyyymmdd, region) of a SigV4 credential `AK/date/region/s3/aws4_request`;
    S3Error `code` when it is malformed."""
    return _parse_credential(credential, code)


def _parse_credential(credential: str, code: str) -> tuple[str, str, str]:
    parts = credential.rsplit("/", 4)
    if len(parts) != 5 or not parts[0]:
        raise S3Error(code, f"Malformed credential {credential!r}.")
    access_key, date, region, service, terminator = parts
    if len(date) != 8 or not (date.isascii() and date.isdigit()):
        raise S3Error(code, f"Invalid credential date {date!r}.")
    if service != "s3":
        raise S3Error(code, f'Incorrect service {service!r}. This endpoint belongs to "s3".')
    if terminator != "aws4_request":
        raise S3Error(
            code, f'Incorrect terminal {terminator!r}. This endpoint uses "aws4_request".'
        )
    return access_key, date, region


def _canonical_headers(hdrs: dict[str, list[str]], signed_headers: list[str]) -> str:
    lines = []
    for name in signed_headers:
        values = hdrs.get(name, [])
        lines.append(name + ":" + ",".join(" ".join(v.split()) for v in values) + "\n")
    return "".join(lines)


def _payload_mode(value: str | None, default: str) -> tuple[str, str | None]:
    """(payload_mode, hex sha256 or None) for an `x-amz-content-sha256` value."""
    if value is None:
        return default, None
    if _HEX64.match(value):
        return "hex", value.lower()
    mode = PAYLOAD_MODES.get(value)
    if mode is not None:
        return mode, None
    if value in _V4A_PAYLOADS:
        raise S3Error("NotImplemented", "SigV4a streaming payloads are not supported.")
    raise S3Error(
        "InvalidArgument",
        "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, "
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD(-TRAILER) or a valid sha256 value.",
        extra={"ArgumentName": "x-amz-content-sha256", "ArgumentValue": value},
    )


# ---------------------------------------------------------------- SigV2


def _v2_header(
    method: str,
    raw_path: bytes,
    query: list[tuple[bytes, bytes]],
    hdrs: dict[str, list[str]],
    authorization: str,
    lookup: Lookup,
    now: datetime,
) -> AuthContext:
    access_key, sep, signature = authorization[4:].strip().rpartition(":")
    if not sep or not access_key or not signature:
        raise S3Error("InvalidArgument", "AWS authorization header is invalid.  Expected AwsAccessKeyId:signature",
                      extra={"ArgumentName": "Authorization", "ArgumentValue": authorization[:64]})
    principal = _lookup(lookup, access_key)
    amz_date = _one(hdrs, "x-amz-date")
    http_date = _one(hdrs, "date")
    if amz_date is None and http_date is None:
        raise S3Error(
            "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
        )
    when_text = amz_date if amz_date is not None else http_date
    assert when_text is not None
    when = _parse_amz_or_http_date(when_text)
    _check_skew(when, now)
    # with x-amz-date the Date line is empty: x-amz-date is signed among the x-amz headers
    date_line = "" if amz_date is not None else (http_date or "")
    _verify_v2(principal, method, raw_path, query, hdrs, date_line, signature)
    mode, sha = _payload_mode(_one(hdrs, "x-amz-content-sha256"), default="none")
    return AuthContext(principal, mode, sha, None, None, None, None, auth_type="v2-header")


def _v2_query(
    method: str,
    raw_path: bytes,
    query: list[tuple[bytes, bytes]],
    hdrs: dict[str, list[str]],
    lookup: Lookup,
    now: datetime,
) -> AuthContext:
    params = {n: unquote_to_bytes(v).decode("utf-8", "replace") for n, v in query}
    expires_text = params.get(b"Expires")
    if expires_text is None or not (expires_text.isascii() and expires_text.isdigit()):
        raise S3Error("AccessDenied", "Query-string authentication requires the Expires parameter")
    principal = _lookup(lookup, params[b"AWSAccessKeyId"])
    if now.timestamp() > int(expires_text):
        raise S3Error("AccessDenied", "Request has expired")
    _verify_v2(principal, method, raw_path, query, hdrs, expires_text, params[b"Signature"])
    mode, sha = _payload_mode(_one(hdrs, "x-amz-content-sha256"), default="none")
    return AuthContext(principal, mode, sha, None, None, None, None, auth_type="v2-query")


def _verify_v2(
    principal: Principal,
    method: str,
    raw_path: bytes,
    query: list[tuple[bytes, bytes]],
    hdrs: dict[str, list[str]],
    date_line: str,
    signature: str,
) -> None:
    """Return if `signature` is `principal`'s SigV2 signature of the request in a form real
    clients sign, else raise SignatureDoesNotMatch. The canonical resource may carry the
    sub-resources of `_V2_SUBRESOURCES` (S3's form) or, for GET and HEAD only, those of
    `_V2_SUBRESOURCES_BOTOCORE` (botocore's and s3cmd's), after either path spelling below."""
    amz = "".join(
        f"{name}:{','.join(' '.join(v.split()) for v in hdrs[name])}\n"
        for name in sorted(hdrs)
        if name.startswith("x-amz-")
    )
    forms = [_V2_SUBRESOURCES]
    # botocore's form leaves four sub-resources unsigned: anyone holding a signed request
    # could add one unnoticed. Accepted for reads only, where the most an added one does is
    # read that configuration of the same bucket or object; on a PUT or DELETE it could turn
    # a signed PutObject or DeleteBucket into a write of a retention, a legal hold, an
    # encryption or a public access block.
    if method in ("GET", "HEAD"):
        forms.append(_V2_SUBRESOURCES_BOTOCORE)
    subs = dict.fromkeys(_v2_subresources(query, names) for names in forms)
    head = "\n".join(
        (method, _one(hdrs, "content-md5") or "", _one(hdrs, "content-type") or "", date_line)
    )
    given = signature.strip().encode("ascii", "replace")
    # clients differ in how they escape the path they sign: accept the raw form and the
    # canonical (decode once, re-encode) form. A bucket's resource is `/bucket/` by AWS's
    # definition (botocore signs that for /bucket), so both spellings name a bucket.
    raw = raw_path.decode("latin-1")
    paths = [raw, canonical_uri(raw_path)]
    if raw.count("/") == 1 and len(raw) > 1:
        paths += [path + "/" for path in paths]
    for path in dict.fromkeys(paths):
        for sub in subs:
            resource = path + ("?" + sub if sub else "")
            string_to_sign = f"{head}\n{amz}{resource}"
            mac = hmac.new(
                principal.secret_key.encode("utf-8"), string_to_sign.encode("utf-8"), hashlib.sha1
            )
            if hmac.compare_digest(base64.b64encode(mac.digest()), given):
                return
    raise S3Error("SignatureDoesNotMatch")


def _v2_subresources(query: list[tuple[bytes, bytes]], names: frozenset[str]) -> str:
    """The `name[=value]&...` part of a SigV2 canonical resource: the query parameters among
    `names`, values decoded, sorted by name ("" when there are none)."""
    subresources = sorted(
        (
            (n.decode("latin-1"), unquote_to_bytes(v).decode("utf-8", "replace"))
            for n, v in query
            if n.decode("latin-1") in names
        ),
        key=lambda pair: pair[0],
    )
    return "&".join(f"{n}={v}" if v else n for n, v in subresources)


# ---------------------------------------------------------------- shared helpers


def hmac_sha256(key: bytes, msg: bytes) -> bytes:
    """HMAC-SHA256 of a short message, computed without letting go of the GIL.

    `hmac.digest` (OpenSSL's one-shot HMAC) always releases the GIL, and on the event loop
    each release hands the GIL to a waiting worker thread and waits to get it back: costlier
    than the HMAC itself. An HMAC object releases it only for updates of 2 KiB or more.
    """
    return hmac.new(key, msg, "sha256").digest()


def check_signature(key: bytes, string_to_sign: str, given: str) -> None:
    """SignatureDoesNotMatch unless `given` is the hex SigV4 signature of `string_to_sign`
    under the signing key `key` (compared as sent: callers lower-case where SigV4 allows)."""
    expected = hmac_sha256(key, string_to_sign.encode("utf-8")).hex()
    # bytes: compare_digest refuses non-ASCII str, and the signature is the client's
    if not hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace")):
        raise S3Error("SignatureDoesNotMatch")


def _header_map(headers: list[tuple[bytes, bytes]]) -> dict[str, list[str]]:
    """Lower-case name -> values in arrival order (latin-1 keeps the bytes exact)."""
    out: dict[str, list[str]] = {}
    for name, value in headers:
        out.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return out


def _one(hdrs: dict[str, list[str]], name: str) -> str | None:
    values = hdrs.get(name)
    if not values:
        return None
    return ",".join(v.strip() for v in values)


def _parse_query(query_string: bytes) -> list[tuple[bytes, bytes]]:
    """Raw (still percent-encoded) pairs; `uploads` ≡ `uploads=`."""
    pairs = []
    for piece in query_string.split(b"&"):
        if piece:
            name, _, value = piece.partition(b"=")
            pairs.append((name, value))
    return pairs


def _has_body(hdrs: dict[str, list[str]]) -> bool:
    length = _one(hdrs, "content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in hdrs


def _lookup(lookup: Lookup, access_key: str) -> Principal:
    principal = lookup(access_key)
    if principal is None:
        raise S3Error("InvalidAccessKeyId")
    return principal


def _check_skew(when: datetime, now: datetime) -> None:
    if abs(now - when) > MAX_SKEW:
        raise S3Error(
            "RequestTimeTooSkewed",
            extra={
                "RequestTime": when.strftime(_AMZ_DATE),
                "ServerTime": now.strftime(_AMZ_DATE),
                "MaxAllowedSkewMilliseconds": "900000",
            },
        )


def _parse_amz_date(value: str, code: str) -> datetime:
    # by hand: strptime costs more than the whole signature check
    if len(value) == 16 and value[8] == "T" and value[15] == "Z":
        digits = value[:8] + value[9:15]
        if digits.isdigit() and digits.isascii():
            try:
                return datetime(
                    int(value[0:4]), int(value[4:6]), int(value[6:8]),
                    int(value[9:11]), int(value[11:13]), int(value[13:15]), tzinfo=UTC,
                )  # fmt: skip
            except ValueError:
                pass
    raise S3Error(code, f"Invalid date {value!r}; expected yyyyMMddTHHmmssZ.")


def _parse_http_date(value: str) -> datetime:
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        raise S3Error("AccessDenied", f"Invalid date {value!r}.") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _parse_amz_or_http_date(value: str) -> datetime:
    try:
        when = _parse_amz_date(value, "AccessDenied")
    except S3Error:
        when = _parse_http_date(value)
    if when.year < 1970:  # AWS: not a date it takes (later ones are merely skewed)
        raise S3Error("AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
    return when
