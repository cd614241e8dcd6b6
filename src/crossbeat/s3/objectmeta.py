"""Object metadata documents (ARCHITECTURE.md) and the HTTP headers they turn into."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from crossbeat.metadata import Bucket
from crossbeat.metadata.ids import new_version_id
from crossbeat.s3.errors import S3Error
from crossbeat.s3.header_text import encoded_word, wire_text

# headers stored verbatim with the object and returned on GET/HEAD
SYSTEM_HEADERS = (
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
    "x-amz-website-redirect-location",
)
# AWS's storage classes. crossbeat keeps every object in its bucket's repository whatever the
# class; the class is recorded and reported (HEAD, listings) as a label.
STORAGE_CLASSES = frozenset({
    "STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING",
    "GLACIER", "DEEP_ARCHIVE", "OUTPOSTS", "GLACIER_IR", "SNOW", "EXPRESS_ONEZONE",
    "FSX_OPENZFS", "FSX_ONTAP",
})
STORAGE_CLASS_HEADER = "x-amz-storage-class"
MAX_USER_METADATA = 2048
# Object Lock is not implemented, so no bucket has its configuration: AWS refuses these
# headers on such a bucket rather than store an object without the protection asked for.
OBJECT_LOCK_HEADERS = (
    "x-amz-object-lock-mode",
    "x-amz-object-lock-retain-until-date",
    "x-amz-object-lock-legal-hold",
)


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def iso_now() -> str:
    """Now as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, milliseconds): the lastModified format."""
    n = datetime.now(UTC)
    return (
        f"{n.year:04d}-{n.month:02d}-{n.day:02d}T{n.hour:02d}:{n.minute:02d}:{n.second:02d}."
        f"{n.microsecond // 1000:03d}Z"
    )


def parse_iso(value: str) -> datetime:
    """A lastModified value (`YYYY-MM-DDTHH:MM:SS.fffZ`, 1 to 6 fraction digits) as UTC."""
    if len(value) < 22 or value[-1] != "Z" or value[19] != "." or value[10] != "T":
        raise ValueError(f"not a lastModified timestamp: {value!r}")
    # fromisoformat is C and strict about the fields; the checks above keep the format ours
    return datetime.fromisoformat(value[:-1]).replace(tzinfo=UTC)


def http_date(iso: str) -> str:
    """A lastModified value as an HTTP date (RFC 7231 IMF-fixdate, whole seconds)."""
    d = parse_iso(iso)
    return (
        f"{_DAYS[d.weekday()]}, {d.day:02d} {_MONTHS[d.month - 1]} {d.year:04d} "
        f"{d.hour:02d}:{d.minute:02d}:{d.second:02d} GMT"
    )


def parse_http_date(value: str) -> datetime | None:
    try:
        dt = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


# What a stored header may not hold: it is echoed on every GET and HEAD, where a control
# character (tab aside) would break the answer (CR/LF: a header of the client's making).
# The HTTP parser refuses them in a request's headers, but a POST form's fields and names,
# a GET's response-* overrides and the internal routes' JSON can carry anything.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def is_header_name(name: str) -> bool:
    """Whether `name` can be an HTTP header's name (an RFC 9110 token)."""
    return _TOKEN.fullmatch(name) is not None


def check_echoable(name: str, value: str) -> None:
    """InvalidArgument unless `name: value` can be sent back as a response header: a token
    for the name, no control character but tab in the value."""
    if not is_header_name(name):
        raise S3Error("InvalidArgument", "Header names must be HTTP tokens.",
                      extra={"ArgumentName": name[:64]})  # fmt: skip
    if _CONTROL.search(value):
        raise S3Error("InvalidArgument", "Header values must not contain control characters.",
                      extra={"ArgumentName": name})  # fmt: skip


def mail_safe(value: str) -> str:
    """A stored value as a response header: non-ASCII text as an RFC 2047 encoded word
    (`=?UTF-8?B?...?=`), as S3 returns non-ASCII metadata; ASCII as it is."""
    return value if value.isascii() else encoded_word(value)


def user_metadata(headers: dict[str, str], *, wire: bool = True) -> dict[str, str]:
    """The x-amz-meta-* of a write, as text (`wire`: from request headers, see wire_text;
    a POST form's fields are text already). MetadataTooLarge past 2 KB, counted in UTF-8
    bytes as S3 counts."""
    meta = {k[len("x-amz-meta-"):]: wire_text(v) if wire else v
            for k, v in headers.items() if k.startswith("x-amz-meta-")}  # fmt: skip
    if sum(len(k.encode()) + len(v.encode("utf-8", "surrogateescape")) for k, v in meta.items()) > MAX_USER_METADATA:
        raise S3Error("MetadataTooLarge", "Your metadata headers exceed the maximum allowed metadata size.", status=400)
    return meta


def refuse_object_lock(headers: dict[str, str]) -> None:
    """InvalidRequest, as AWS answers for a bucket without Object Lock, if a write asks for
    retention or a legal hold."""
    if any(h in headers for h in OBJECT_LOCK_HEADERS):
        raise S3Error("InvalidRequest", "Bucket is missing Object Lock Configuration")


def storage_class_header(headers: dict[str, str]) -> str | None:
    """The request's x-amz-storage-class, validated (InvalidStorageClass); None for STANDARD
    or none, which, as on AWS, GET and HEAD do not report."""
    value = headers.get(STORAGE_CLASS_HEADER)
    if value is None:
        return None
    if value not in STORAGE_CLASSES:
        raise S3Error("InvalidStorageClass", f"The storage class you specified is not valid: {value!r}")
    return None if value == "STANDARD" else value


def storage_class(meta: dict[str, Any]) -> str:
    """An object's (or an upload's) storage class, as listings report it."""
    return (meta.get("systemHeaders") or {}).get(STORAGE_CLASS_HEADER) or "STANDARD"


# The headers that ask for encryption: SSE-S3 and SSE-KMS carry the first, SSE-C the
# customer ones (looked up by name: every PUT and GET passes here)
_SSE_C_HEADERS = (
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-server-side-encryption-customer-key",
)
SSE_HEADERS = (
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    *_SSE_C_HEADERS,
    "x-amz-copy-source-server-side-encryption-customer-algorithm",
    "x-amz-copy-source-server-side-encryption-customer-key",
)


def refuse_encryption(headers: dict[str, str]) -> None:
    """NotImplemented if a write asks for server-side encryption (SSE-S3, SSE-KMS, SSE-C).
    crossbeat stores data unencrypted: storing it anyway would break the writer's
    expectation, and for SSE-C would serve the object to readers without the key."""
    for name in SSE_HEADERS:
        if name in headers:
            raise S3Error("NotImplemented", "Server-side encryption is not implemented by "
                          "crossbeat; nothing was stored.", extra={"Header": name})


def require_length(headers: dict[str, str]) -> None:
    """MissingContentLength (411), as AWS answers, for an upload that declares neither a
    Content-Length nor a chunked body: HTTP reads it as empty, which is rarely what the
    client meant to store."""
    if "content-length" not in headers and "transfer-encoding" not in headers:
        raise S3Error("MissingContentLength")


def require_checksum(headers: dict[str, str]) -> None:
    """AWS requires the body of some configuration PUTs (lifecycle, CORS) to carry an
    integrity check: Content-MD5 or a flexible checksum (header or declared trailer).
    InvalidRequest when there is none; the body decoder then verifies whichever was sent."""
    if "content-md5" in headers:
        return
    if any(name.startswith("x-amz-checksum-") and name != "x-amz-checksum-type" for name in headers):
        return
    if "x-amz-checksum-" in headers.get("x-amz-trailer", "").lower():
        return
    raise S3Error("InvalidRequest", "Missing required header for this request: Content-MD5 OR x-amz-checksum-*")


def refuse_customer_key(headers: dict[str, str]) -> None:
    """A read naming an SSE-C key: no object here is encrypted with one (AWS's answer for
    an object stored without SSE-C)."""
    for name in _SSE_C_HEADERS:
        if name in headers:
            raise S3Error("InvalidRequest", "The encryption parameters are not applicable to this object.")


def system_headers(headers: dict[str, str], *, wire: bool = True) -> dict[str, str]:
    """The headers stored with a new object and returned on GET/HEAD (storage class
    validated), as text (`wire`: see user_metadata); raises InvalidStorageClass."""
    out = {k: wire_text(headers[k]) if wire else headers[k] for k in SYSTEM_HEADERS if k in headers}
    sc = storage_class_header(headers)
    if sc is not None:
        out[STORAGE_CLASS_HEADER] = sc
    if "content-encoding" in out:
        encoding = stored_content_encoding(out.pop("content-encoding"))
        if encoding:
            out["content-encoding"] = encoding
    return out


def stored_content_encoding(value: str | None) -> str | None:
    """The Content-Encoding an object keeps: aws-chunked is transfer framing, not a property
    of the object, so it goes (`gzip,aws-chunked` -> `gzip`; `aws-chunked` -> None); the
    rest stays as sent (`deflate, gzip` keeps its space, as S3 keeps it)."""
    if value is None:
        return None
    kept = ",".join(e for e in value.split(",") if e.strip().lower() != "aws-chunked").strip(", \t")
    return kept or None


def quoted(etag: str) -> str:
    return f'"{etag}"'


def object_headers(meta: dict[str, Any], versioned: bool) -> dict[str, str]:
    """Response headers describing one object version (GET/HEAD)."""
    h: dict[str, str] = {
        "etag": quoted(meta["etag"]),
        "last-modified": http_date(meta["lastModified"]),
        "content-type": meta.get("contentType") or "binary/octet-stream",
        "accept-ranges": "bytes",
    }
    for k, v in (meta.get("systemHeaders") or {}).items():
        h[k] = mail_safe(v)
    for k, v in (meta.get("userMetadata") or {}).items():
        h[f"x-amz-meta-{k}"] = mail_safe(v)
    if versioned or meta.get("versionId") not in (None, "null"):
        h["x-amz-version-id"] = meta.get("versionId") or "null"
    info = meta.get("replicationInfo")
    if info and info.get("status"):
        h["x-amz-replication-status"] = info["status"]
    tags = meta.get("tags")
    if tags:
        h["x-amz-tagging-count"] = str(len(tags))
    return h


def checksum_headers(meta: dict[str, Any]) -> dict[str, str]:
    cs = meta.get("checksum")
    if not cs:
        return {}
    h = {f"x-amz-checksum-{cs['algorithm'].lower()}": cs["value"]}
    if cs.get("type"):
        h["x-amz-checksum-type"] = cs["type"]
    return h


# One range of bytes, digits only: int() alone also took '1_0', '+1' and ' 3'.
_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)")


def parse_range(value: str | None, size: int) -> tuple[int, int] | None:
    """`bytes=a-b` → (start, end exclusive); None = the whole object, also for a malformed
    value or several ranges (as S3: RFC 9110 lets a server ignore Range). Unsatisfiable
    (a start past the end, a suffix of 0) → InvalidRange, 416 with `bytes */size`."""
    if not value:
        return None
    m = _RANGE.fullmatch(value.strip())
    if m is None:
        return None
    first, last = m.groups()
    if len(first) > 19 or len(last) > 19:  # past any size (int() refuses 4,300 digits: a 500)
        return None
    if not first:
        if not last:
            return None
        n = int(last)
        if n == 0 or size == 0:
            _unsatisfiable(size, value)
        return max(0, size - n), size
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        _unsatisfiable(size, value)
    return start, min(int(last) + 1 if last else size, size)


def _unsatisfiable(size: int, requested: str) -> None:
    raise S3Error(
        "InvalidRange",
        headers={"content-range": f"bytes */{size}"},
        extra={"RangeRequested": requested.strip()[:256], "ActualObjectSize": str(size)},
    )


def if_range_holds(value: str, meta: dict[str, Any]) -> bool:
    """Whether a Range goes with `If-Range: value` (RFC 9110 13.1.5): the object is still
    the one the client has part of. An entity tag must match strongly (a weak one never
    does); a date must be the object's Last-Modified exactly. Anything else does not hold:
    the client then gets the whole object, never a piece of another one."""
    value = value.strip()
    if value.startswith('"'):
        return value == quoted(meta["etag"])
    if value.startswith("W/"):
        return False
    dt = parse_http_date(value)
    return dt is not None and dt == parse_iso(meta["lastModified"]).replace(microsecond=0)


def check_conditionals(meta: dict[str, Any], headers: dict[str, str], prefix: str = "if-") -> None:
    """GET/HEAD (and copy-source) preconditions, in the order RFC 7232 and S3 apply them."""
    etag = meta["etag"]
    if_match = headers.get(prefix + "match")
    if_none_match = headers.get(prefix + "none-match")
    if_modified = headers.get(prefix + "modified-since")
    if_unmodified = headers.get(prefix + "unmodified-since")
    if if_match is None and if_none_match is None and not if_modified and not if_unmodified:
        return
    modified = parse_iso(meta["lastModified"]).replace(microsecond=0)
    failed = "PreconditionFailed"
    not_modified = "NotModified" if prefix == "if-" else "PreconditionFailed"
    if if_match is not None:
        if not etag_matches(if_match, etag):
            raise S3Error(failed, extra={"Condition": "If-Match"})
    elif if_unmodified:
        dt = parse_http_date(if_unmodified)
        if dt is not None and modified > dt:
            raise S3Error(failed, extra={"Condition": "If-Unmodified-Since"})
    if if_none_match is not None:
        if etag_matches(if_none_match, etag, weak=True):
            raise S3Error(not_modified, headers=_nm_headers(meta))
    elif if_modified:
        dt = parse_http_date(if_modified)
        if dt is not None and modified <= dt:
            raise S3Error(not_modified, headers=_nm_headers(meta))


def _nm_headers(meta: dict[str, Any]) -> dict[str, str]:
    """What a 304 repeats of the 200 it stands for (RFC 9110 15.4.5): the validators and
    the caching headers, which a cache refreshes its stored response from."""
    h = {"etag": quoted(meta["etag"]), "last-modified": http_date(meta["lastModified"])}
    for name, value in (meta.get("systemHeaders") or {}).items():
        if name in ("cache-control", "expires"):
            h[name] = mail_safe(value)  # as the 200 says them
    return h


def etag_matches(header: str, etag: str, *, weak: bool = False) -> bool:
    """Whether an If-Match / If-None-Match list names `etag` (or is '*'). Strong
    comparison (If-Match) never matches a weak tag W/"..."; weak comparison (If-None-Match)
    ignores the W/ (RFC 9110 13.1.1, 13.1.2)."""
    for candidate in header.split(","):
        c = candidate.strip()
        if c == "*":
            return True
        if c.startswith("W/"):
            if not weak:
                continue
            c = c[2:]
        if c.strip('"') == etag:
            return True
    return False


def new_version_id_for(bucket: Bucket) -> str:
    """The versionId of a new version: a fresh id when versioning is Enabled, else "null".
    Its sortKey, its place among the key's versions, is the metadata store's to choose (on
    top, whatever the clock says)."""
    return new_version_id() if bucket.versioning == "Enabled" else "null"


def delete_marker(bucket: Bucket, key: str, replication_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The metadata of a new delete marker for `key`, what DELETE without a versionId writes
    in a versioned or suspended bucket (a "null" marker when suspended)."""
    return {
        "bucket": bucket.name,
        "key": key,
        "versionId": new_version_id_for(bucket),
        "isLatest": True,
        "isDeleteMarker": True,
        "size": 0,
        "etag": "",
        "contentType": "",
        "lastModified": iso_now(),
        "userMetadata": {},
        "tags": {},
        "location": [],
        "owner": bucket.owner,
        "replicationInfo": replication_info,
    }
