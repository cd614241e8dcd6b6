"""Object handlers: put, get, head, delete (with full versioning semantics), copy, tagging,
DeleteObjects.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

from crossbeat.metadata import Bucket
from crossbeat.metadata.errors import RevisionMismatch
from crossbeat.repositories import CorruptData, Location, NoSuchData, Repository
from crossbeat.s3 import acl, xmldoc
from crossbeat.s3.auth import Principal
from crossbeat.s3.buckets import acl_xml
from crossbeat.s3.checksums import new_hasher, normalize_algorithm
from crossbeat.s3.datapath import (
    GroupCommit,
    Written,
    copy_io_repository,
    open_read,
    range_chunks,
    read_document,
    read_range,
    read_range_sync,
    reads_locally,
    write_body,
)
from crossbeat.s3.errors import S3Error
from crossbeat.s3.http import Request, Response, xml_response
from crossbeat.s3.lifecycle_config import expiration_header
from crossbeat.s3.numerals import ascii_int
from crossbeat.s3.objectmeta import (
    OBJECT_LOCK_HEADERS,
    SSE_HEADERS,
    STORAGE_CLASS_HEADER,
    check_conditionals,
    check_echoable,
    checksum_headers,
    delete_marker,
    etag_matches,
    http_date,
    if_range_holds,
    iso_now,
    new_version_id_for,
    object_headers,
    parse_http_date,
    parse_iso,
    parse_range,
    quoted,
    refuse_customer_key,
    refuse_encryption,
    refuse_object_lock,
    require_length,
    storage_class_header,
    system_headers,
    user_metadata,
    wire_text,
)
from crossbeat.s3.put_batcher import BuildMeta
from crossbeat.s3.replication import REPLICA, replication_info
from crossbeat.s3.version_check import check_version_id_arg

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

T = TypeVar("T")
# A GET or copy whose data vanished between its lookup and its read looks again, this often
VANISHED_ATTEMPTS = 3
RESPONSE_OVERRIDES = {
    "response-content-type": "content-type",
    "response-content-language": "content-language",
    "response-expires": "expires",
    "response-cache-control": "cache-control",
    "response-content-disposition": "content-disposition",
    "response-content-encoding": "content-encoding",
}


# Headers asking for what a new object cannot have here (Object Lock, server-side
# encryption, an ACL); most writes carry none, so one pass over the headers settles them.
_REFUSED_ON_WRITE = frozenset({*OBJECT_LOCK_HEADERS, *SSE_HEADERS, *acl.GRANT_HEADERS, "x-amz-acl"})


def refuse_unsupported_writes(headers: dict[str, str]) -> None:
    """What PUT, CopyObject and CreateMultipartUpload refuse rather than ignore: Object Lock
    (InvalidRequest), server-side encryption (NotImplemented), an ACL beyond the owner's
    (AccessControlListNotSupported)."""
    if _REFUSED_ON_WRITE.isdisjoint(headers):
        return
    refuse_object_lock(headers)
    refuse_encryption(headers)
    acl.refuse_acl_headers(headers)


def write_precondition(headers: dict[str, str]) -> Any:
    """If-None-Match: * / If-Match on PUT and Complete, checked inside the store transaction.
    If-None-Match with anything but `*` is NotImplemented, as on AWS (rather than ignored)."""
    if_none = headers.get("if-none-match")
    if_match = headers.get("if-match")
    if if_none is None and if_match is None:
        return None
    if if_none is not None and if_none.strip() != "*":
        raise S3Error("NotImplemented", "If-None-Match on a write takes only '*'.",
                      extra={"Header": "If-None-Match"})

    def check(current: dict[str, Any] | None) -> None:
        live = current if current and not current.get("isDeleteMarker") else None
        if if_none is not None and live is not None:
            raise S3Error("PreconditionFailed", extra={"Condition": "If-None-Match"})
        if if_match is not None:
            _check_if_match(if_match, live)

    return check


def _check_if_match(if_match: str, live: dict[str, Any] | None) -> None:
    """If-Match of a write or delete against the version it would replace or remove (None
    when there is none, or it is a delete marker)."""
    if live is None:
        raise S3Error("NoSuchKey")
    if not etag_matches(if_match, live["etag"]):
        raise S3Error("PreconditionFailed", extra={"Condition": "If-Match"})


def delete_precondition(target: xmldoc.DeleteTarget) -> Any:
    """A conditional delete (DeleteObject's If-Match, x-amz-if-match-size and
    x-amz-if-match-last-modified-time; a DeleteObjects entry's ETag, Size, LastModifiedTime):
    the version the delete removes, or without a versionId the current one, must match each
    condition given (last-modified to the second). Checked inside the store transaction, so
    an overwrite that commits first is never deleted by mistake."""
    if target.etag is None and target.size is None and target.last_modified is None:
        return None

    def check(current: dict[str, Any] | None) -> None:
        live = current if current and not current.get("isDeleteMarker") else None
        _check_if_match(target.etag or "*", live)
        assert live is not None  # _check_if_match refused a missing version
        if target.size is not None and live["size"] != target.size:
            raise S3Error("PreconditionFailed", extra={"Condition": "x-amz-if-match-size"})
        if target.last_modified is not None and (
            int(parse_iso(live["lastModified"]).timestamp()) != int(target.last_modified.timestamp())
        ):
            raise S3Error("PreconditionFailed",
                          extra={"Condition": "x-amz-if-match-last-modified-time"})

    return check


def delete_target(req: Request) -> xmldoc.DeleteTarget:
    """DeleteObject's key, versionId and conditions; a malformed condition is InvalidArgument."""
    h = req.headers
    size, modified = h.get("x-amz-if-match-size"), h.get("x-amz-if-match-last-modified-time")
    if size is not None and ascii_int(size.strip()) is None:
        raise S3Error("InvalidArgument", "x-amz-if-match-size must be a non-negative integer.")
    moment = parse_http_date(modified) if modified is not None else None
    if modified is not None and moment is None:
        raise S3Error("InvalidArgument", "x-amz-if-match-last-modified-time must be an HTTP date.")
    return xmldoc.DeleteTarget(
        req.key, req.query.get("versionId"), h.get("if-match"),
        int(size) if size is not None else None, moment,
    )


def new_meta(
    bucket: Bucket,
    key: str,
    *,
    size: int,
    etag: str,
    location: list[dict[str, Any]],
    headers: dict[str, str],
    tags: dict[str, str],
    content_type: str | None,
    user_meta: dict[str, str],
    sys_headers: dict[str, str],
) -> dict[str, Any]:
    return {
        "bucket": bucket.name,
        "key": key,
        "versionId": new_version_id_for(bucket),
        "isLatest": True,
        "isDeleteMarker": False,
        "size": size,
        "etag": etag,
        "contentType": content_type or "binary/octet-stream",
        "lastModified": iso_now(),
        "userMetadata": user_meta,
        "systemHeaders": sys_headers,
        "tags": tags,
        "location": location,
        "owner": bucket.owner,
        "replicationInfo": replication_info(bucket, key, tags),
    }


async def commit_version(
    gw: Gateway, meta: dict[str, Any], written: list[Location], precondition: Any = None
) -> None:
    """Store the version; on failure free the data just written; then free displaced data."""
    try:
        displaced = await gw.run(gw.store.put_version, meta, precondition=precondition)
    except BaseException:
        await gw.free([{"location": [loc.to_json() for loc in written]}])
        raise
    await gw.free(displaced)


def _write_headers(bucket: Bucket, meta: dict[str, Any], *, null_version: bool = False) -> dict[str, str]:
    """ETag and the new version's id. A null version (unversioned or suspended bucket) has
    no x-amz-version-id, as on S3, except where `null_version` (CopyObject, whose answer
    names it on a bucket that has had versioning)."""
    h = {"etag": quoted(meta["etag"])}
    if meta["versionId"] != "null" or (null_version and bucket.versioning):
        h["x-amz-version-id"] = meta["versionId"]
    return h


def version_builder(
    bucket: Bucket,
    key: str,
    headers: dict[str, str],
    *,
    tags: dict[str, str],
    user_meta: dict[str, str],
    sys_headers: dict[str, str],
    content_type: str | None,
) -> BuildMeta:
    """How a new version of `key` written by PutObject (or POST Object) is built once its data
    is durable: `build(written, current)` with the bucket as read at commit time. The bucket
    gone or re-created by another owner since the request began is NoSuchBucket."""

    def build(written: Written, current: Bucket | None) -> dict[str, Any]:
        # Runs on a worker thread, once the data is durable, with the bucket read again:
        # versioning and replication may have changed (in any gateway process) since the
        # request began, and the version must follow the state it commits under.
        if current is None or current.owner != bucket.owner:
            raise S3Error("NoSuchBucket", resource=f"/{bucket.name}", extra={"BucketName": bucket.name})
        meta = new_meta(
            current, key, size=written.size, etag=written.md5_hex,
            location=[written.location.to_json()], headers=headers, tags=tags,
            content_type=content_type, user_meta=user_meta, sys_headers=sys_headers,
        )
        cs = written.checksums
        if cs.algorithm and cs.value_b64:
            meta["checksum"] = {"algorithm": cs.algorithm, "value": cs.value_b64, "type": "FULL_OBJECT"}
        return meta

    return build


def version_committer(
    gw: Gateway, bucket: str, build: BuildMeta, precondition: Any = None
) -> Callable[[Written], dict[str, Any]]:
    """`commit(written)` (worker thread, after the data is durable): build the version from
    the bucket as it is now, store it with its journal entry (the store checks
    `precondition` in the same transaction) and free the data it displaced. If it raises,
    the caller (datapath's `then`) deletes the data just written."""

    def commit(written: Written) -> dict[str, Any]:
        meta = build(written, gw.store.get_bucket(bucket))
        displaced = gw.store.put_version(meta, precondition=precondition)
        gw.free_now(displaced)
        return meta

    return commit


def write_headers(bucket: Bucket, meta: dict[str, Any], written: Written) -> dict[str, str]:
    """The headers answering a new object's write: ETag, the version id unless it is the null
    version, the checksum computed or verified."""
    headers = _write_headers(bucket, meta)
    echoed = written.checksums.headers()
    if echoed:  # an object written whole: its checksum is of all of it, as S3 says
        echoed["x-amz-checksum-type"] = "FULL_OBJECT"
    headers.update(echoed)
    return headers


async def put_object(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    bucket = await gw.bucket(req.bucket, p)
    require_length(req.headers)
    refuse_unsupported_writes(req.headers)
    build = version_builder(
        bucket, req.key, req.headers,
        tags=xmldoc.parse_tagging_header(req.headers.get("x-amz-tagging")),
        user_meta=user_metadata(req.headers), sys_headers=system_headers(req.headers),
        content_type=req.headers.get("content-type"),
    )
    precondition = write_precondition(req.headers)
    commit = version_committer(gw, bucket.name, build, precondition)
    # Without a precondition (checked inside the store's transaction) a small PUT commits
    # in a batch with others.
    group = GroupCommit(bucket.name, build) if precondition is None else None
    written, meta = await write_body(gw, req, ctx, gw.location_for(bucket), then=commit, group=group)
    assert meta is not None
    headers = write_headers(bucket, meta, written)
    add_expiration(gw, bucket.name, meta, headers)
    return Response(headers=headers)


def add_expiration(gw: Gateway, bucket: str, meta: dict[str, Any], headers: dict[str, str]) -> None:
    """Add x-amz-expiration when a lifecycle rule will expire `meta` (see
    lifecycle_config.expiration_header); for a bucket without lifecycle rules, the usual
    case, this is a dictionary lookup."""
    config = gw.lifecycle_of(bucket)
    if config:
        value = expiration_header(config, meta, gw.settings.lifecycle_day_seconds)
        if value is not None:
            headers["x-amz-expiration"] = value


def lookup_sync(
    gw: Gateway, bucket: str, key: str, version_id: str | None, *, object_gone: bool = True
) -> dict[str, Any]:
    """The addressed version, or the S3 error GET/HEAD return for it (worker thread).

    A delete marker named by its versionId is 405 MethodNotAllowed with its Last-Modified;
    a current delete marker is 404 NoSuchKey when the object is asked for (`object_gone`),
    405 when a sub-resource of that version is (tagging, ACL: as S3 answers them)."""
    meta = gw.store.get_version(bucket, key, version_id)
    resource = f"/{bucket}/{key}"
    if meta is None:
        if version_id is not None:
            raise S3Error("NoSuchVersion", resource=resource, extra={"Key": key, "VersionId": version_id})
        raise S3Error("NoSuchKey", resource=resource, extra={"Key": key})
    if meta.get("isDeleteMarker"):
        marker_headers = {"x-amz-delete-marker": "true", "x-amz-version-id": meta["versionId"]}
        if version_id is not None or not object_gone:
            marker_headers["allow"] = "DELETE"
            marker_headers["last-modified"] = http_date(meta["lastModified"])
            raise S3Error("MethodNotAllowed", resource=resource, headers=marker_headers)
        raise S3Error("NoSuchKey", resource=resource, headers=marker_headers, extra={"Key": key})
    return meta


async def lookup(
    gw: Gateway, bucket: str, key: str, version_id: str | None, *, object_gone: bool = True
) -> dict[str, Any]:
    return await gw.run(partial(lookup_sync, object_gone=object_gone), gw, bucket, key, version_id)


def _prepare_get(
    gw: Gateway, req: Request, head: bool, read_limit: int
) -> tuple[int, dict[str, str], dict[str, Any], int, int, bytes | None]:
    """Everything GET/HEAD needs in one call: the version, preconditions, range, headers,
    and the bytes themselves when the range is at most `read_limit` long."""
    refuse_customer_key(req.headers)
    meta = lookup_sync(gw, req.bucket, req.key, req.query.get("versionId"))
    versioned = meta["versionId"] != "null"
    if not versioned:
        current = gw.store.get_bucket(req.bucket)
        versioned = bool(current and current.versioning)
    check_conditionals(meta, req.headers)
    size = int(meta["size"])
    headers = object_headers(meta, versioned)
    rng: tuple[int, int] | None
    part_number = req.query.get("partNumber")
    if part_number is not None:
        if "range" in req.headers:
            raise S3Error("InvalidRequest", "Cannot specify both Range header and partNumber query parameter")
        rng = _part_range(meta, part_number)
        if meta.get("parts"):  # AWS sends the count only when a part is asked for
            headers["x-amz-mp-parts-count"] = str(len(meta["parts"]))
    else:
        if_range = req.headers.get("if-range")
        # a Range whose If-Range no longer holds is ignored: the client's piece is of
        # another object, it gets this one whole (a resumed download stays whole)
        holds = if_range is None or if_range_holds(if_range, meta)
        rng = parse_range(req.headers.get("range"), size) if holds else None
    for param, header in RESPONSE_OVERRIDES.items():
        if param in req.query:
            check_echoable(param, req.query[param])
            try:  # sent as it is, as S3 does: what latin-1 cannot carry is refused
                req.query[param].encode("latin-1")
            except UnicodeEncodeError:
                raise S3Error("InvalidArgument", "Header value cannot be represented using ISO-8859-1.",
                              extra={"ArgumentName": param, "ArgumentValue": req.query[param][:256]}) from None
            headers[header] = req.query[param]
    status = 200
    start, end = 0, size
    checksum_mode = req.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED"
    if rng is not None and rng[0] == rng[1]:  # an empty part: no range can say it
        start = end = rng[0]
    elif rng is not None:
        start, end = rng
        status = 206
        headers["content-range"] = f"bytes {start}-{end - 1}/{size}"
    if checksum_mode and part_number is not None:
        headers.update(_part_checksum_headers(meta, part_number))
    elif checksum_mode and rng is None:  # (a range has no checksum of its own, as on S3)
        headers.update(checksum_headers(meta))
    headers["content-length"] = str(end - start)
    data = None
    if not head and end - start <= read_limit and reads_locally(gw, meta, start, end):
        data = read_range_sync(gw, meta, start, end)
    return status, headers, meta, start, end, data


async def get_object(gw: Gateway, req: Request, p: Principal, head: bool) -> Response:
    await gw.bucket(req.bucket, p)
    return await retry_vanished(partial(_get_object, gw, req, head))


async def read_object(gw: Gateway, req: Request) -> Response:
    """GetObject of `req`'s bucket and key for a caller the owner check does not apply to
    (the internal object route: see internal.get_object_bytes)."""
    return await retry_vanished(partial(_get_object, gw, req, False))


async def _get_object(gw: Gateway, req: Request, head: bool) -> Response:
    # Right here on the event loop: a metadata read and, for a small object, two small file
    # reads cost less than a worker thread's hand-offs. Larger bytes are read by a worker.
    status, headers, meta, start, end, data = _prepare_get(
        gw, req, head, gw.settings.inline_object_bytes
    )
    add_expiration(gw, req.bucket, meta, headers)
    if head:
        return Response(status=status, headers=headers)
    if data is None and end - start <= gw.settings.small_object_bytes:
        data = await read_range(gw, meta, start, end)
    if data is not None:
        return Response(status=status, headers=headers, body=data)
    stream = await open_read(gw, meta, start, end)
    return Response(status=status, headers=headers, stream=stream)


def _part_checksum_headers(meta: dict[str, Any], part_number: str) -> dict[str, str]:
    """The checksum of part `part_number` (validated by `_part_range`), as S3 answers a GET
    of a part in checksum mode: the part's own for an object uploaded in parts with one for
    each part, the object's for an object in one part (its part 1); none otherwise."""
    cs = meta.get("checksum")
    parts = meta.get("parts")
    if not cs or not parts:
        return checksum_headers(meta)
    values = meta.get("partChecksums") or []
    n = int(part_number)
    if len(values) != len(parts) or not 1 <= n <= len(values):
        return {}
    return {f"x-amz-checksum-{cs['algorithm'].lower()}": values[n - 1]}


def _part_range(meta: dict[str, Any], part_number: str) -> tuple[int, int] | None:
    """The byte range [start, end) of part `part_number`. An object not uploaded in parts
    is one part: part 1 is all of it (206 with its Content-Range, as AWS answers; None, a
    plain 200, only for an empty object, which has no byte range). An empty part of a
    multipart object is an empty range: a 200 with no body (it was the whole object, and
    a download by parts came out with the object twice)."""
    try:
        n = int(part_number)
    except ValueError as exc:
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000") from exc
    parts = meta.get("parts") or [int(meta["size"])]
    if not 1 <= n <= 10000:
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000")
    if n > len(parts):
        raise S3Error("InvalidPartNumber", "The requested partnumber is not satisfiable", status=416)
    if not parts[n - 1] and not meta.get("parts"):
        return None
    start = sum(parts[: n - 1])
    return start, start + parts[n - 1]


async def delete_one(gw: Gateway, bucket: Bucket, target: xmldoc.DeleteTarget) -> dict[str, str]:
    """Delete with S3 versioning semantics, if the target's conditions hold (see
    `delete_precondition`); returns the response headers it implies."""
    key, version_id = target.key, target.version_id
    precondition = delete_precondition(target)
    if version_id is not None:
        removed = await gw.run(gw.store.delete_version, bucket.name, key, version_id,
                               precondition=precondition)
        headers = {"x-amz-version-id": version_id}
        if removed is not None:
            if removed.get("isDeleteMarker"):
                headers["x-amz-delete-marker"] = "true"
            await gw.free([removed])
        return headers
    if not bucket.versioning:
        removed = await gw.run(gw.store.delete_version, bucket.name, key, "null",
                               precondition=precondition)
        if removed is not None:
            await gw.free([removed])
        return {}
    marker = delete_marker(bucket, key, replication_info(bucket, key, {}, delete_marker=True))
    displaced = await gw.run(gw.store.put_version, marker, precondition=precondition)
    await gw.free(displaced)
    return {"x-amz-delete-marker": "true", "x-amz-version-id": marker["versionId"]}


async def delete_object(gw: Gateway, req: Request, p: Principal) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    headers = await delete_one(gw, bucket, delete_target(req))
    return Response(status=204, headers=headers)


# DeleteObjects' entries deleted at once: each is a store transaction of its own, and those
# in flight together share the store's group commit (one after another, 1,000 keys took
# 1.1 s, 3.5 s beside other writes)
DELETE_OBJECTS_CONCURRENCY = 16


async def delete_objects(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    quiet, items = xmldoc.parse_delete_objects(await read_document(req, ctx))
    slots = asyncio.Semaphore(DELETE_OBJECTS_CONCURRENCY)

    async def one(target: xmldoc.DeleteTarget) -> xmldoc.DeletedObject | xmldoc.DeleteError:
        key, version_id = target.key, target.version_id
        try:
            if not key:
                raise S3Error("InvalidArgument", "An object key must not be empty.")
            if version_id == "":
                raise S3Error("NoSuchVersion")
            if version_id is not None:  # as DeleteObject answers it: an entry's error
                check_version_id_arg(version_id)
            async with slots:
                h = await delete_one(gw, bucket, target)
        except S3Error as err:
            return xmldoc.DeleteError(key, err.code, err.message, version_id)
        entry = xmldoc.DeletedObject(key, version_id)
        if h.get("x-amz-delete-marker") == "true":
            # the marker made, or the one a versionId named and this deleted (S3's DeletedObject)
            entry.delete_marker = True
            entry.delete_marker_version_id = h.get("x-amz-version-id") or version_id
        return entry

    # every entry runs to its end before any failure other than an S3 error is raised: none
    # is left running after the answer
    outcomes = await asyncio.gather(*(one(t) for t in items), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    deleted = [o for o in outcomes if isinstance(o, xmldoc.DeletedObject) and not quiet]
    errors = [o for o in outcomes if isinstance(o, xmldoc.DeleteError)]
    return xml_response(xmldoc.delete_result_xml(deleted, errors))


def parse_copy_source(value: str) -> tuple[str, str, str | None]:
    raw = value.strip()
    path, _, query = raw.partition("?")
    path = unquote(path).lstrip("/")
    bucket, _, key = path.partition("/")
    if not bucket or not key:
        raise S3Error("InvalidArgument", "Copy Source must mention the source bucket and key: sourcebucket/sourcekey")
    version_id = None
    for part in query.split("&"):
        name, _, val = part.partition("=")
        if name == "versionId":
            version_id = unquote(val)
            check_version_id_arg(version_id, "x-amz-copy-source")
    return bucket, key, version_id


async def copy_source(gw: Gateway, req: Request, p: Principal) -> tuple[dict[str, Any], str | None]:
    src_bucket, src_key, src_version = parse_copy_source(req.headers["x-amz-copy-source"])
    await gw.bucket(src_bucket, p)
    meta = await gw.run(gw.store.get_version, src_bucket, src_key, src_version)
    if meta is None:
        if src_version is not None:
            raise S3Error("NoSuchVersion", extra={"Key": src_key, "VersionId": src_version})
        raise S3Error("NoSuchKey", extra={"Key": src_key})
    if meta.get("isDeleteMarker"):
        if src_version is not None:
            raise S3Error("InvalidRequest", "The source of a copy request may not specifically refer to a delete marker by version id.")
        raise S3Error("NoSuchKey", extra={"Key": src_key})
    check_conditionals(meta, req.headers, prefix="x-amz-copy-source-if-")
    return meta, src_version


def copy_data_checked(
    gw: Gateway, meta: dict[str, Any], repo: Repository, start: int, end: int, algorithm: str | None
) -> tuple[Location, str, str | None]:
    """Copy bytes [start, end) of a stored object into `repo` (worker thread), computing
    their MD5 and their checksum of `algorithm` (a name of checksums.ALGORITHMS; base64,
    None without one): (location, md5 hex, checksum). A source read that comes up short (or
    long) of `end - start` bytes raises before the copy commits, so damage in the source's
    repository never spreads to a new object."""
    md5 = hashlib.md5()
    hasher = new_hasher(algorithm) if algorithm is not None else None
    writer = repo.writer()
    try:
        for chunk in range_chunks(gw, meta, start, end):
            md5.update(chunk)
            if hasher is not None:
                hasher.update(chunk)
            writer.write(chunk)
        if writer.bytes_written != end - start:  # (each piece is checked too: the sum's guard)
            first = (meta.get("location") or [{}])[0]
            raise CorruptData(
                str(first.get("location", "?")), str(first.get("dataKey", "?")), None,
                f"copy source {meta.get('bucket')}/{meta.get('key')} gave {writer.bytes_written} "
                f"bytes of the {end - start} asked for",
            )
        return writer.commit(), md5.hexdigest(), hasher.b64() if hasher is not None else None
    except BaseException:
        writer.abort()
        raise


async def retry_vanished(attempt: Callable[[], Awaitable[T]]) -> T:
    """`attempt()`: a lookup, then a read of the data it found. Run again when that data was
    gone before the read began (`NoSuchData`; nothing was sent or stored yet): the version
    was overwritten or deleted in between, and a new lookup finds what replaced it. Data
    missing under a version that stays is still an error, after the last attempt."""
    for _ in range(VANISHED_ATTEMPTS - 1):
        try:
            return await attempt()
        except NoSuchData:
            continue
    return await attempt()


REDIRECT_HEADER = "x-amz-website-redirect-location"


async def copy_object(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    refuse_unsupported_writes(req.headers)
    await read_document(req, ctx)
    directive = req.headers.get("x-amz-metadata-directive", "COPY").upper()
    tag_directive = req.headers.get("x-amz-tagging-directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE") or tag_directive not in ("COPY", "REPLACE"):
        raise S3Error("InvalidArgument", "Unknown metadata or tagging directive")
    # the checksum the copy is to have, computed from its bytes: how S3 changes an object's
    # checksum algorithm ("you can copy an individual object")
    wanted = req.headers.get("x-amz-checksum-algorithm")
    algorithm = normalize_algorithm(wanted) if wanted is not None else None

    async def copied() -> tuple[dict[str, Any], str | None, Location, str, str | None]:
        src, src_version = await copy_source(gw, req, p)
        same = src["bucket"] == req.bucket and src["key"] == req.key and src_version in (None, src["versionId"])
        # (a new checksum algorithm counts: a copy in place is how an object gets one)
        changes = {STORAGE_CLASS_HEADER, REDIRECT_HEADER, "x-amz-checksum-algorithm"} & req.headers.keys()
        if same and directive == "COPY" and not bucket.versioning and not changes:
            raise S3Error(
                "InvalidRequest",
                "This copy request is illegal because it is trying to copy an object to itself without "
                "changing the object's metadata, storage class, website redirect location or encryption attributes.",
            )
        target = gw.location_for(bucket)
        # on a remote repository's own threads if source or target has some (see run_io)
        location, md5_hex, value = await gw.run_io(
            copy_io_repository(gw, src, target), copy_data_checked, gw, src, target, 0, int(src["size"]), algorithm
        )
        return src, src_version, location, md5_hex, value

    src, src_version, location, md5_hex, checksum = await retry_vanished(copied)
    if directive == "REPLACE":
        umeta, ctype, sys_h = user_metadata(req.headers), req.headers.get("content-type"), system_headers(req.headers)
    else:
        umeta, ctype, sys_h = dict(src.get("userMetadata") or {}), src.get("contentType"), dict(src.get("systemHeaders") or {})
        # the storage class and the website redirect are the request's, not the source's
        # (STANDARD and none unless given: S3 copies neither)
        sys_h.pop(STORAGE_CLASS_HEADER, None)
        if (sc := storage_class_header(req.headers)) is not None:
            sys_h[STORAGE_CLASS_HEADER] = sc
        sys_h.pop(REDIRECT_HEADER, None)
        if REDIRECT_HEADER in req.headers:
            sys_h[REDIRECT_HEADER] = wire_text(req.headers[REDIRECT_HEADER])
    tags = xmldoc.parse_tagging_header(req.headers.get("x-amz-tagging")) if tag_directive == "REPLACE" else dict(src.get("tags") or {})
    meta = new_meta(
        bucket, req.key, size=location.size, etag=md5_hex, location=[location.to_json()],
        headers=req.headers, tags=tags, content_type=ctype, user_meta=umeta, sys_headers=sys_h,
    )
    if algorithm is not None and checksum is not None:
        meta["checksum"] = {"algorithm": algorithm, "value": checksum, "type": "FULL_OBJECT"}
    elif src.get("checksum") and src["checksum"].get("type") == "FULL_OBJECT":
        meta["checksum"] = dict(src["checksum"])
    await commit_version(gw, meta, [location], write_precondition(req.headers))
    headers = _write_headers(bucket, meta, null_version=True)
    if src_version is not None or src.get("versionId") != "null":
        headers["x-amz-copy-source-version-id"] = src["versionId"]
    add_expiration(gw, bucket.name, meta, headers)
    return xml_response(
        xmldoc.copy_object_result_xml(meta["etag"], meta["lastModified"], _checksum_map(meta)),
        headers=headers,
    )


async def _update_tags(
    gw: Gateway, req: Request, bucket: Bucket, tags: dict[str, str] | None
) -> dict[str, Any]:
    """Compare-and-set the tag set of one version (retried on concurrent changes).

    A version this site wrote, in a bucket that replicates it, goes back to PENDING, as on
    AWS: the new tags are copied to the destinations (they stayed COMPLETED with the old
    tags). A replica's tags are the destination's own to change."""
    for _ in range(20):
        meta = await lookup(gw, req.bucket, req.key, req.query.get("versionId"), object_gone=False)
        new = dict(meta)
        new["tags"] = tags or {}
        info = meta.get("replicationInfo") or {}
        if info.get("status") != REPLICA:
            again = replication_info(bucket, req.key, new["tags"])
            if again is not None:
                new["replicationInfo"] = again
        try:
            return await gw.run(
                gw.store.update_version, req.bucket, req.key, meta["versionId"], new,
                expected_revision=meta["revision"],
            )
        except RevisionMismatch:
            continue
    raise S3Error("OperationAborted")


async def put_tagging(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    bucket = await gw.bucket(req.bucket, p)
    tags = xmldoc.parse_tagging(await read_document(req, ctx))
    meta = await _update_tags(gw, req, bucket, tags)
    return Response(headers={"x-amz-version-id": meta["versionId"]})


async def get_tagging(gw: Gateway, req: Request, p: Principal) -> Response:
    await gw.bucket(req.bucket, p)
    meta = await lookup(gw, req.bucket, req.key, req.query.get("versionId"), object_gone=False)
    return xml_response(xmldoc.tagging_xml(meta.get("tags") or {}), headers={"x-amz-version-id": meta["versionId"]})


async def delete_tagging(gw: Gateway, req: Request, p: Principal) -> Response:
    bucket = await gw.bucket(req.bucket, p)
    meta = await _update_tags(gw, req, bucket, None)
    return Response(status=204, headers={"x-amz-version-id": meta["versionId"]})


async def put_acl(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    """PutObjectAcl: only an ACL that grants the owner alone (see s3/acl.py); a no-op."""
    bucket = await gw.bucket(req.bucket, p)
    await lookup(gw, req.bucket, req.key, req.query.get("versionId"), object_gone=False)
    acl.refuse_acl_headers(req.headers)
    acl.refuse_acl_document(await read_document(req, ctx), bucket.owner)
    return Response()


async def get_acl(gw: Gateway, req: Request, p: Principal) -> Response:
    await gw.bucket(req.bucket, p)
    await lookup(gw, req.bucket, req.key, req.query.get("versionId"), object_gone=False)
    return xml_response(acl_xml(p.access_key, p.display_name))


def _checksum_map(meta: dict[str, Any]) -> dict[str, str]:
    cs = meta.get("checksum")
    return {cs["algorithm"].lower(): cs["value"]} if cs else {}
