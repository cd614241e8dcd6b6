"""S3 listings over the metadata store: ListObjects V1/V2, ListObjectVersions,
ListMultipartUploads and ListParts, rendered as XML bytes.

Each function takes the store (anything with the `crossbeat.metadata` listing methods), the
bucket (its name, or a `Bucket` record whose `owner` then fills `<Owner>`), and the request's
decoded query parameters. Bad parameters raise `S3Error("InvalidArgument")` before the store
is read.

Delimiter handling: a key whose remainder after the prefix contains the delimiter rolls up
into a common prefix. Common prefixes count toward max-keys and appear once: after emitting
one, the scan restarts *past* every key under it (`_past`), so a prefix holding a million
keys costs one extra store query, not a million rows. A marker (V1 marker, V2 continuation
token, key-marker) that is itself a common prefix resumes past that prefix in the same way,
which is how the next page continues after a page that ended on a common prefix.

Object listings skip keys whose latest version is a delete marker; a common prefix is shown
only if at least one key under it would be listed.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from crossbeat.s3.checksums import default_type
from crossbeat.s3.errors import S3Error
from crossbeat.s3.numerals import ascii_int
from crossbeat.s3.objectmeta import storage_class
from crossbeat.s3.version_check import check_version_id_arg
from crossbeat.s3.xmldoc import (
    CHECKSUM_ELEMENTS,
    XmlWriter,
    iso8601,
    list_parts_xml,
    list_uploads_xml,
    quote_etag,
    url_encode,
    xml_text,
)

MAX_KEYS = 1000
# The greatest code point: appended to a common prefix it sorts after (almost) every key under
# that prefix in UTF-8 binary order; keys that still sort inside are skipped by the scan.
_TOP = "\U0010ffff"
_FIRST_BATCH = 16

Meta = dict[str, Any]


class ListingStore(Protocol):
    """The part of `crossbeat.metadata.MetadataStore` the listings use."""

    def list_latest(
        self, bucket: str, *, prefix: str = "", start_after: str = "", limit: int = 1000,
        live_only: bool = False,
    ) -> list[Meta]: ...

    def list_versions(
        self,
        bucket: str,
        *,
        prefix: str = "",
        key_marker: str = "",
        version_marker: str = "",
        limit: int = 1000,
    ) -> list[Meta]: ...

    def list_uploads(
        self,
        bucket: str,
        *,
        prefix: str = "",
        key_marker: str = "",
        upload_id_marker: str = "",
        limit: int = 1000,
    ) -> list[Meta]: ...

    def list_parts(self, upload_id: str, *, marker: int = 0, limit: int = 1000) -> list[Meta]: ...


# --------------------------------------------------------------------------------------------
# parameters


def _invalid(message: str, name: str, value: str) -> S3Error:
    return S3Error("InvalidArgument", message, extra={"ArgumentName": name, "ArgumentValue": value})


def parse_max(query: Mapping[str, str], name: str, default: int = MAX_KEYS) -> int:
    """max-keys / max-uploads / max-parts: an integer ≥ 0, values above 1000 capped at 1000 (as
    AWS does); anything else is InvalidArgument."""
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    value = ascii_int(raw, signed=True)
    if value is None or value > 2**31 - 1:  # an int32 on AWS: a larger one is refused, not capped
        raise _invalid(f"Provided {name} not an integer or within integer range", name, raw)
    if value < 0:
        raise _invalid(f"Argument {name} must be an integer between 0 and 2147483647", name, raw)
    return min(value, MAX_KEYS)


def parse_encoding(query: Mapping[str, str]) -> bool:
    """True for `encoding-type=url`; absent → False; any other value → InvalidArgument."""
    raw = query.get("encoding-type")
    if raw is None:
        return False
    if raw.lower() != "url":
        raise _invalid("Invalid Encoding Method specified in Request", "encoding-type", raw)
    return True


def encode_token(key: str) -> str:
    """The opaque V2 continuation token for a page that ended at `key` (URL-safe base64)."""
    return base64.urlsafe_b64encode(key.encode("utf-8")).decode("ascii")


def decode_token(token: str) -> str:
    """The key a continuation token names; InvalidArgument if it is not one of ours (an
    empty one neither: it names no key, and was taken as "from the start", as AWS does not)."""
    try:
        if not token:
            raise ValueError("empty")
        padded = token + "=" * (-len(token) % 4)
        # validate: a lenient decode skips characters outside the alphabet, so "%%%" would
        # name the empty key and list from the start
        raw = base64.b64decode(padded.replace("+", "-").replace("/", "_"), altchars=b"-_", validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, ValueError):
        raise _invalid(
            "The continuation token provided is incorrect", "continuation-token", token
        ) from None


def _common_prefix(key: str, prefix: str, delimiter: str) -> str | None:
    """The common prefix `key` rolls up into, or None."""
    if not delimiter:
        return None
    at = key.find(delimiter, len(prefix))
    return None if at < 0 else key[: at + len(delimiter)]


def _past(common_prefix: str) -> str:
    return common_prefix + _TOP


# --------------------------------------------------------------------------------------------
# the scan shared by every listing


@dataclass
class _Page:
    entries: list[Meta] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    truncated: bool = False
    last_key: str | None = None  # last key or common prefix emitted
    last_sub: str | None = None  # its versionId / uploadId (None for a common prefix)


Fetch = Callable[[str, str, int], list[Meta]]


def _scan(
    fetch: Fetch,
    *,
    prefix: str,
    delimiter: str,
    start_key: str,
    start_sub: str,
    max_items: int,
    sub_field: str | None,
    skip_delete_markers: bool,
) -> _Page:
    """Walk the store from (start_key, start_sub) exclusive, rolling keys up into common
    prefixes, until `max_items` entries+prefixes are collected; `truncated` is set only if a
    further listable item exists. `fetch(key_marker, sub_marker, limit)` reads the store."""
    page = _Page()
    if max_items == 0:
        return page
    skip = _common_prefix(start_key, prefix, delimiter)
    if skip is not None and skip == start_key:
        start_key, start_sub = _past(skip), ""
    else:
        skip = None
    cursor_key, cursor_sub = start_key, start_sub
    # With a delimiter, rows fetched after the first key of a common prefix are wasted (the
    # scan re-seeks past the prefix), so batches start small and grow while no key rolls up.
    # Without one, a batch is what the page still needs plus one row of look-ahead, growing
    # when skipped rows (delete markers) leave the page short.
    batch_size = _FIRST_BATCH if delimiter else MAX_KEYS
    floor = 0
    while True:
        remaining = max_items - len(page.entries) - len(page.prefixes)
        limit = min(max(remaining + 1, floor), batch_size)
        batch = fetch(cursor_key, cursor_sub, limit)
        batch_size = min(batch_size * 2, MAX_KEYS)
        floor = limit * 2
        reseek = False
        for meta in batch:
            key = meta["key"]
            cursor_key = key
            cursor_sub = str(meta.get(sub_field) or "") if sub_field else ""
            if skip is not None and key.startswith(skip):
                continue  # a key under the prefix just emitted that sorts after _past()
            if skip_delete_markers and meta.get("isDeleteMarker"):
                continue
            if remaining == 0:
                page.truncated = True
                return page
            common = _common_prefix(key, prefix, delimiter)
            remaining -= 1
            if common is None:
                page.entries.append(meta)
                page.last_key, page.last_sub = key, cursor_sub
                continue
            page.prefixes.append(common)
            page.last_key, page.last_sub = common, None
            skip = common
            cursor_key, cursor_sub = _past(common), ""
            batch_size, floor = _FIRST_BATCH, 0
            reseek = True
            break
        if not reseek and len(batch) < limit:
            return page


# --------------------------------------------------------------------------------------------
# rendering helpers


def _bucket_name_owner(bucket: Any, owner: tuple[str, str] | None) -> tuple[str, tuple[str, str]]:
    if isinstance(bucket, str):
        return bucket, owner or ("", "")
    name = str(bucket.name)
    bucket_owner = str(getattr(bucket, "owner", "") or "")
    return name, owner or (bucket_owner, bucket_owner)


def _checksum_algorithms(meta: Meta) -> list[str]:
    """Algorithms of the object's stored checksum: the gateway's `checksum` record
    ({algorithm, value, type}), else a `checksums` map or a `checksumAlgorithm` name."""
    checksum = meta.get("checksum")
    if isinstance(checksum, dict) and checksum.get("algorithm"):
        return [str(checksum["algorithm"]).upper()]
    algorithms = [
        alg.upper() for alg in (meta.get("checksums") or {}) if alg.lower() in CHECKSUM_ELEMENTS
    ]
    if not algorithms and meta.get("checksumAlgorithm"):
        algorithms = [str(meta["checksumAlgorithm"]).upper()]
    return algorithms


def _checksum_type(meta: Meta) -> str | None:
    checksum = meta.get("checksum")
    if isinstance(checksum, dict) and checksum.get("type"):
        return str(checksum["type"])
    return None


def _owner(w: XmlWriter, meta: Meta, owner: tuple[str, str]) -> None:
    w.owner(meta.get("owner") or owner[0], meta.get("ownerDisplayName") or owner[1])


def _object_fields(w: XmlWriter, meta: Meta, enc: Callable[[str], str]) -> None:
    # One string per object: listings render up to 1000 of these per request.
    checksum = "".join(
        f"<ChecksumAlgorithm>{xml_text(a)}</ChecksumAlgorithm>" for a in _checksum_algorithms(meta)
    )
    checksum_type = _checksum_type(meta)
    if checksum_type:
        checksum += f"<ChecksumType>{xml_text(checksum_type)}</ChecksumType>"
    w.raw(
        f"<Key>{xml_text(enc(meta['key']))}</Key>"
        f"<LastModified>{xml_text(iso8601(meta.get('lastModified', 0)))}</LastModified>"
        f"<ETag>&quot;{xml_text(str(meta.get('etag', '')).strip().strip(chr(34)))}&quot;</ETag>"
        f"{checksum}"
        f"<Size>{int(meta.get('size') or 0)}</Size>"
        f"<StorageClass>{xml_text(storage_class(meta))}</StorageClass>"
    )


def _identity(value: str) -> str:
    return value


# --------------------------------------------------------------------------------------------
# ListObjects V1 / V2


def list_objects(
    store: ListingStore,
    bucket: Any,
    query: Mapping[str, str],
    v2: bool,
    *,
    owner: tuple[str, str] | None = None,
) -> bytes:
    """ListBucketResult for ListObjects (V1, `v2=False`) or ListObjectsV2.

    V1: marker, NextMarker (only with a delimiter, when truncated), Owner always.
    V2: continuation-token (opaque, wins over start-after), start-after, KeyCount,
    NextContinuationToken, Owner only with fetch-owner=true."""
    name, owner = _bucket_name_owner(bucket, owner)
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    max_keys = parse_max(query, "max-keys")
    encode = parse_encoding(query)
    enc = url_encode if encode else _identity
    token = query.get("continuation-token") if v2 else None
    start_after = query.get("start-after", "") if v2 else ""
    marker = "" if v2 else query.get("marker", "")
    # V2: the continuation token wins over start-after; both are exclusive start keys.
    start = marker
    if v2:
        start = decode_token(token) if token is not None else start_after
    page = _scan(
        lambda k, _s, n: store.list_latest(name, prefix=prefix, start_after=k, limit=n, live_only=True),
        prefix=prefix,
        delimiter=delimiter,
        start_key=start,
        start_sub="",
        max_items=max_keys,
        sub_field=None,
        skip_delete_markers=True,
    )
    with_owner = not v2 or query.get("fetch-owner", "").lower() == "true"

    w = XmlWriter("ListBucketResult")
    w.leaf("Name", name).leaf("Prefix", enc(prefix))
    if not v2:
        w.leaf("Marker", enc(marker))
    w.leaf("MaxKeys", max_keys)
    if delimiter:
        w.leaf("Delimiter", enc(delimiter))
    w.leaf("IsTruncated", page.truncated)
    if v2:
        w.leaf("KeyCount", len(page.entries) + len(page.prefixes))
        w.leaf("ContinuationToken", token)
        if page.truncated and page.last_key is not None:
            w.leaf("NextContinuationToken", encode_token(page.last_key))
        if start_after:
            w.leaf("StartAfter", enc(start_after))
    elif page.truncated and delimiter and page.last_key is not None:
        w.leaf("NextMarker", enc(page.last_key))
    if encode:
        w.leaf("EncodingType", "url")
    for meta in page.entries:
        w.open("Contents")
        _object_fields(w, meta, enc)
        if with_owner:
            _owner(w, meta, owner)
        w.close()
    for common in page.prefixes:
        w.open("CommonPrefixes").leaf("Prefix", enc(common)).close()
    return bytes(w)


# --------------------------------------------------------------------------------------------
# ListObjectVersions


def list_object_versions(
    store: ListingStore,
    bucket: Any,
    query: Mapping[str, str],
    *,
    owner: tuple[str, str] | None = None,
) -> bytes:
    """ListVersionsResult: Version and DeleteMarker entries interleaved in (key ascending,
    newest first) order; key-marker / version-id-marker pagination (a version-id-marker
    without a key-marker is InvalidArgument); the null version's id renders as "null"."""
    name, owner = _bucket_name_owner(bucket, owner)
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    max_keys = parse_max(query, "max-keys")
    encode = parse_encoding(query)
    enc = url_encode if encode else _identity
    key_marker = query.get("key-marker", "")
    version_marker = query.get("version-id-marker", "")
    if version_marker and not key_marker:
        raise _invalid(
            "A version-id marker cannot be specified without a key marker.",
            "version-id-marker",
            version_marker,
        )
    if version_marker:
        check_version_id_arg(version_marker, "version-id-marker")
    page = _scan(
        lambda k, s, n: store.list_versions(
            name, prefix=prefix, key_marker=k, version_marker=s, limit=n
        ),
        prefix=prefix,
        delimiter=delimiter,
        start_key=key_marker,
        start_sub=version_marker,
        max_items=max_keys,
        sub_field="versionId",
        skip_delete_markers=False,
    )

    w = XmlWriter("ListVersionsResult")
    w.leaf("Name", name).leaf("Prefix", enc(prefix))
    w.leaf("KeyMarker", enc(key_marker)).leaf("VersionIdMarker", version_marker)
    if page.truncated and page.last_key is not None:
        w.leaf("NextKeyMarker", enc(page.last_key))
        w.leaf("NextVersionIdMarker", page.last_sub)
    w.leaf("MaxKeys", max_keys)
    if delimiter:
        w.leaf("Delimiter", enc(delimiter))
    w.leaf("IsTruncated", page.truncated)
    if encode:
        w.leaf("EncodingType", "url")
    for meta in page.entries:
        is_marker = bool(meta.get("isDeleteMarker"))
        w.open("DeleteMarker" if is_marker else "Version")
        w.leaf("Key", enc(meta["key"])).leaf("VersionId", meta.get("versionId") or "null")
        w.leaf("IsLatest", bool(meta.get("isLatest")))
        w.leaf("LastModified", iso8601(meta.get("lastModified", 0)))
        if not is_marker:
            w.leaf("ETag", quote_etag(str(meta.get("etag", ""))))
            for algorithm in _checksum_algorithms(meta):
                w.leaf("ChecksumAlgorithm", algorithm)
            w.leaf("ChecksumType", _checksum_type(meta))
            w.leaf("Size", meta.get("size", 0))
            w.leaf("StorageClass", storage_class(meta))
        _owner(w, meta, owner)
        w.close()
    for common in page.prefixes:
        w.open("CommonPrefixes").leaf("Prefix", enc(common)).close()
    return bytes(w)


# --------------------------------------------------------------------------------------------
# multipart


def list_multipart_uploads(
    store: ListingStore,
    bucket: Any,
    query: Mapping[str, str],
    *,
    owner: tuple[str, str] | None = None,
) -> bytes:
    """ListMultipartUploadsResult: uploads in (key, uploadId) order, delimiter and prefix as
    for objects, key-marker / upload-id-marker (ignored without key-marker, as AWS),
    max-uploads (≤ 1000)."""
    name, owner = _bucket_name_owner(bucket, owner)
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    max_uploads = parse_max(query, "max-uploads")
    encode = parse_encoding(query)
    key_marker = query.get("key-marker", "")
    upload_id_marker = query.get("upload-id-marker", "") if key_marker else ""
    page = _scan(
        lambda k, s, n: store.list_uploads(
            name, prefix=prefix, key_marker=k, upload_id_marker=s, limit=n
        ),
        prefix=prefix,
        delimiter=delimiter,
        start_key=key_marker,
        start_sub=upload_id_marker,
        max_items=max_uploads,
        sub_field="uploadId",
        skip_delete_markers=False,
    )
    return list_uploads_xml(
        bucket=name,
        uploads=page.entries,
        common_prefixes=page.prefixes,
        prefix=prefix,
        delimiter=delimiter,
        key_marker=key_marker,
        upload_id_marker=upload_id_marker,
        next_key_marker=page.last_key if page.truncated else None,
        next_upload_id_marker=page.last_sub if page.truncated else None,
        max_uploads=max_uploads,
        is_truncated=page.truncated,
        encode=encode,
        owner_id=owner[0],
        owner_name=owner[1],
    )


def list_parts(
    store: ListingStore,
    upload: Meta,
    query: Mapping[str, str],
    *,
    owner: tuple[str, str] | None = None,
) -> bytes:
    """ListPartsResult for `upload` (the store's upload dict): part-number-marker (an
    integer ≥ 0, else InvalidArgument), max-parts (≤ 1000)."""
    raw_marker = query.get("part-number-marker", "") or "0"
    try:
        marker = int(raw_marker)
    except ValueError:
        marker = -1
    if marker < 0:
        raise _invalid(
            "Argument part-number-marker must be an integer between 0 and 2147483647",
            "part-number-marker",
            raw_marker,
        )
    max_parts = parse_max(query, "max-parts")
    parts = store.list_parts(upload["uploadId"], marker=marker, limit=max_parts + 1)
    # max-parts=0 asks for nothing and is not truncated, as max-keys=0 and max-uploads=0:
    # it said IsTruncated with no NextPartNumberMarker to go on from
    truncated = len(parts) > max_parts > 0
    parts = parts[:max_parts]
    meta = upload.get("meta") or {}
    # uploads made before their meta carried the initiator have it at the top level
    owner_id = meta.get("owner") or upload.get("owner") or (owner[0] if owner else "")
    owner_name = meta.get("ownerDisplayName") or (owner[1] if owner else owner_id)
    return list_parts_xml(
        bucket=upload["bucket"],
        key=upload["key"],
        upload_id=upload["uploadId"],
        parts=parts,
        part_number_marker=marker,
        # an empty page (a marker past the last part) still names where to go on, as AWS
        next_part_number_marker=parts[-1]["partNumber"] if parts else marker,
        max_parts=max_parts,
        is_truncated=truncated,
        owner_id=owner_id,
        owner_name=owner_name,
        storage_class=storage_class(meta),
        checksum_algorithm=meta.get("checksumAlgorithm"),
        # (uploads made before their type was kept have their algorithm's default)
        checksum_type=meta.get("checksumType") or (
            default_type(meta["checksumAlgorithm"]) if meta.get("checksumAlgorithm") else None),
    )
