"""Multipart uploads: create, upload part (and part copy), complete, abort, list.

Completing concatenates the parts' data locations into the new version's `location[]`
(no data is copied); `parts` keeps each part's size for GET ?partNumber=.

An upload created with a checksum algorithm gives every part that algorithm's checksum
(verified when the client sent it, computed when it did not, also for a copied part), so
its object gets the checksum, of the upload's type, that the upload was created with.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from crossbeat.metadata import Bucket
from crossbeat.metadata.errors import NoSuchUpload, PartReplaced
from crossbeat.metadata.ids import new_upload_id
from crossbeat.repositories import Location, Repository
from crossbeat.s3 import checksums, listing, xmldoc
from crossbeat.s3.auth import Principal
from crossbeat.s3.body import BodyDecoder
from crossbeat.s3.datapath import (
    Written,
    copy_io_repository,
    read_document,
    write_body,
    write_stream,
)
from crossbeat.s3.errors import S3Error
from crossbeat.s3.http import Request, Response, xml_response
from crossbeat.s3.lifecycle_config import abort_headers
from crossbeat.s3.numerals import ascii_int
from crossbeat.s3.objectmeta import (
    iso_now,
    quoted,
    refuse_encryption,
    require_length,
    system_headers,
    user_metadata,
)
from crossbeat.s3.objects import (
    add_expiration,
    commit_version,
    copy_data_checked,
    copy_source,
    new_meta,
    refuse_unsupported_writes,
    retry_vanished,
    write_precondition,
)

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

MAX_PARTS = 10_000
# S3's largest part, uploaded or copied (the object's limit applies to their sum)
MAX_PART_BYTES = 5 * 1024**3


async def create_upload(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    await gw.bucket(req.bucket, p)
    refuse_unsupported_writes(req.headers)
    await read_document(req, ctx)
    algorithm, checksum_type = checksums.upload_checksum(
        req.headers.get("x-amz-checksum-algorithm"), req.headers.get("x-amz-checksum-type")
    )
    upload_id = new_upload_id()
    upload = {
        "uploadId": upload_id,
        "bucket": req.bucket,
        "key": req.key,
        "initiated": iso_now(),
        "owner": p.access_key,
        "meta": {
            "contentType": req.headers.get("content-type"),
            "userMetadata": user_metadata(req.headers),
            "systemHeaders": system_headers(req.headers),
            "tags": xmldoc.parse_tagging_header(req.headers.get("x-amz-tagging")),
            "checksumAlgorithm": algorithm,
            "checksumType": checksum_type,
            # the Initiator and Owner of ListParts and ListMultipartUploads
            "owner": p.access_key,
            "ownerDisplayName": p.display_name,
        },
    }
    await gw.run(gw.store.create_upload, upload)
    headers = _abort_headers(gw, upload)
    if algorithm and checksum_type:
        headers["x-amz-checksum-algorithm"] = algorithm
        headers["x-amz-checksum-type"] = checksum_type
    return xml_response(xmldoc.initiate_upload_xml(req.bucket, req.key, upload_id), headers=headers)


async def _upload(gw: Gateway, req: Request) -> dict[str, Any]:
    upload = await gw.run(gw.store.get_upload, req.bucket, req.key, req.query["uploadId"])
    if upload is None:
        raise S3Error("NoSuchUpload", extra={"UploadId": req.query["uploadId"]})
    return upload


def _part_number(req: Request) -> int:
    n = ascii_int(req.query.get("partNumber", ""))
    if n is None or not 1 <= n <= MAX_PARTS:
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive")
    return n


async def _store_part(gw: Gateway, upload_id: str, part: dict[str, Any]) -> None:
    """Record `part` (its data already written); if that fails for any reason, its data is
    freed (nothing points at it: a full disk's SQLITE_FULL left it for the cleanup pass)."""
    unrecorded = {**part, "pendingFree": False}  # (no store record to forget once freed)
    try:
        displaced = await gw.run(gw.store.put_part, upload_id, part)
    except NoSuchUpload as exc:
        await gw.free([unrecorded])
        raise S3Error("NoSuchUpload", extra={"UploadId": upload_id}) from exc
    except BaseException:
        await asyncio.shield(gw.free([unrecorded]))
        raise
    if displaced:
        await gw.free([displaced])


async def upload_part(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    bucket = await gw.bucket(req.bucket, p)
    require_length(req.headers)
    refuse_encryption(req.headers)
    number = _part_number(req)
    upload = await _upload(gw, req)
    written = await _write_part(gw, req, ctx, gw.location_for(bucket), upload["meta"].get("checksumAlgorithm"))
    cs = written.checksums
    part = {
        "partNumber": number,
        "etag": written.md5_hex,
        "size": written.size,
        "location": [written.location.to_json()],
        "checksums": {cs.algorithm: cs.value_b64} if cs.algorithm and cs.value_b64 else {},
        "lastModified": iso_now(),
    }
    await _store_part(gw, upload["uploadId"], part)
    headers = {"etag": quoted(written.md5_hex)}
    headers.update(cs.headers())
    return Response(headers=headers)


async def _write_part(gw: Gateway, req: Request, ctx: Any, repo: Repository, algorithm: str | None) -> Written:
    """Decode, verify and store an UploadPart's body. In an upload created with checksum
    `algorithm` the part gets that algorithm's checksum: verified if the client sent one,
    else computed as the body arrives. A checksum of another algorithm is S3's
    InvalidRequest, before any byte is read: the object could never get its checksum."""
    limit = min(MAX_PART_BYTES, gw.settings.max_object_bytes)
    if not algorithm:
        written, _ = await write_body(gw, req, ctx, repo, limit=limit)
        return written
    decoder = BodyDecoder(ctx, req.headers, default_algorithm=algorithm)
    if decoder.algorithm != algorithm:
        raise S3Error(
            "InvalidRequest",
            f"Checksum Type mismatch occurred, expected checksum Type: {algorithm.lower()}, "
            f"actual checksum Type: {str(decoder.algorithm).lower()}",
        )
    if decoder.decoded_length is not None and decoder.decoded_length > limit:
        raise S3Error("EntityTooLarge")
    # streamed whatever its size: write_body takes no default algorithm, and its shortcuts
    # for small bodies matter little to parts (all but the last are 5 MiB or more)
    written, _ = await write_stream(gw, req.body_chunks(), decoder, repo, limit=limit)
    return written


def parse_copy_source_range(value: str, size: int) -> tuple[int, int]:
    """`bytes=first-last` of UploadPartCopy → (first, last + 1). Unlike a GET Range, both ends
    are required and must lie in the source: anything else is InvalidArgument (a GET-style
    open or clamped range would copy a different part than the client asked for)."""
    unit, _, spec = value.strip().partition("=")
    first, sep, last = spec.partition("-")
    start, final = ascii_int(first), ascii_int(last)
    if not (unit == "bytes" and sep) or start is None or final is None:
        raise S3Error("InvalidArgument", "The x-amz-copy-source-range value must be of the form "
                      "bytes=first-last where first and last are the zero-based offsets of the "
                      "first and last bytes to copy")
    stop = final + 1
    if start >= stop or stop > size:
        raise S3Error("InvalidArgument", f"Range specified is not valid for source object of size: {size}",
                      extra={"ArgumentName": "x-amz-copy-source-range", "ArgumentValue": value})
    return start, stop


async def upload_part_copy(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    bucket = await gw.bucket(req.bucket, p)
    refuse_encryption(req.headers)
    number = _part_number(req)
    upload = await _upload(gw, req)
    await read_document(req, ctx)
    algorithm = upload["meta"].get("checksumAlgorithm")

    async def copied() -> tuple[dict[str, Any], Location, str, str | None]:
        src, _ = await copy_source(gw, req, p)
        size = int(src["size"])
        copy_range = req.headers.get("x-amz-copy-source-range")
        start, end = parse_copy_source_range(copy_range, size) if copy_range is not None else (0, size)
        if end - start > MAX_PART_BYTES:
            raise S3Error("InvalidRequest", "The specified copy source is larger than the maximum "
                          f"allowable size for a copy source: {MAX_PART_BYTES}")
        target = gw.location_for(bucket)
        # on a remote repository's own threads if source or target has some, as CopyObject
        location, md5_hex, checksum = await gw.run_io(
            copy_io_repository(gw, src, target), copy_data_checked, gw, src, target, start, end, algorithm
        )
        return src, location, md5_hex, checksum

    src, location, md5_hex, checksum = await retry_vanished(copied)
    modified = iso_now()
    part = {
        "partNumber": number,
        "etag": md5_hex,
        "size": location.size,
        "location": [location.to_json()],
        "checksums": {algorithm: checksum} if algorithm and checksum else {},
        "lastModified": modified,
    }
    await _store_part(gw, upload["uploadId"], part)
    headers = {}
    if src.get("versionId") != "null":
        headers["x-amz-copy-source-version-id"] = src["versionId"]
    shown = {algorithm.lower(): checksum} if algorithm and checksum else {}
    return xml_response(xmldoc.copy_part_result_xml(md5_hex, modified, shown), headers=headers)


async def _all_parts(gw: Gateway, upload_id: str) -> dict[int, dict[str, Any]]:
    parts: dict[int, dict[str, Any]] = {}
    marker = 0
    while True:
        page = await gw.run(gw.store.list_parts, upload_id, marker=marker, limit=1000)
        for part in page:
            parts[int(part["partNumber"])] = part
        if len(page) < 1000:
            return parts
        marker = int(page[-1]["partNumber"])


async def complete_upload(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    upload_id = req.query["uploadId"]
    requested = xmldoc.parse_complete_upload(await read_document(req, ctx, object_checksum=True))
    if not requested:
        raise S3Error("MalformedXML", "You must specify at least one part")
    upload = await gw.run(gw.store.get_upload, req.bucket, req.key, upload_id)
    if upload is None:
        return await _completed_already(gw, req, bucket, upload_id, requested)
    stored = await _all_parts(gw, upload_id)
    chosen: list[dict[str, Any]] = []
    last = 0
    for item in requested:
        if item.part_number <= last:
            raise S3Error("InvalidPartOrder")
        last = item.part_number
        part = stored.get(item.part_number)
        if part is None or item.etag.strip('"') != part["etag"]:
            # the fields S3's error document carries, so a client can say which part
            raise S3Error("InvalidPart", extra={
                "UploadId": upload_id, "PartNumber": str(item.part_number), "ETag": xmldoc.quote_etag(item.etag)})
        chosen.append(part)
    for part in chosen[:-1]:
        if int(part["size"]) < gw.settings.min_part_bytes:
            raise S3Error("EntityTooSmall", extra={
                "ProposedSize": str(part["size"]), "MinSizeAllowed": str(gw.settings.min_part_bytes),
                "PartNumber": str(part["partNumber"]), "ETag": xmldoc.quote_etag(part["etag"])})
    if sum(int(c["size"]) for c in chosen) > gw.settings.max_object_bytes:
        # the object's limit, as a PutObject's (each part was checked against its own)
        raise S3Error("EntityTooLarge")
    um = upload["meta"]
    meta = new_meta(
        bucket, req.key, size=sum(int(c["size"]) for c in chosen), etag=_multipart_etag(c["etag"] for c in chosen),
        location=[loc for c in chosen for loc in c["location"]], headers=req.headers,
        tags=um.get("tags") or {}, content_type=um.get("contentType"),
        user_meta=um.get("userMetadata") or {}, sys_headers=um.get("systemHeaders") or {},
    )
    meta["parts"] = [int(c["size"]) for c in chosen]
    meta["uploadId"] = upload_id  # a repeated Complete finds what this one made
    if algorithm := um.get("checksumAlgorithm"):
        # Every part of an upload with an algorithm has its checksum (UploadPart and
        # UploadPartCopy compute what the client did not send); only a part stored before
        # they did can lack it, and its object then has none. A Complete may leave the part
        # checksums out (the stored ones are what counts); one it names must match.
        kept = [(c.get("checksums") or {}).get(algorithm) for c in chosen]
        for item, kept_value in zip(requested, kept, strict=True):
            sent = item.checksums.get(algorithm.lower())
            if sent and kept_value and sent != kept_value:
                raise S3Error("InvalidPart", f"checksum of part {item.part_number} does not match",
                              extra={"UploadId": upload_id, "PartNumber": str(item.part_number),
                                     "ETag": xmldoc.quote_etag(item.etag)})
        if all(kept):
            part_values = [str(v) for v in kept]
            value, combined_type = checksums.combine_parts(
                algorithm, part_values, [int(c["size"]) for c in chosen], um.get("checksumType"),
            )
            meta["checksum"] = {"algorithm": algorithm, "value": value, "type": combined_type}
            meta["partChecksums"] = part_values  # GetObjectAttributes
    _check_object_checksum(req.headers, meta.get("checksum"))
    try:
        displaced, unused = await gw.run(
            gw.store.complete_upload, upload_id, meta, precondition=write_precondition(req.headers)
        )
    except NoSuchUpload:
        # completed (or aborted) by a request that overtook this one
        return await _completed_already(gw, req, bucket, upload_id, requested)
    except PartReplaced as exc:
        # an UploadPart of a part named here overtook this Complete: its ETag is no longer
        # the one given, as AWS answers when the replacement came first
        raise S3Error("InvalidPart") from exc
    await gw.free(displaced + unused)
    return _completed(gw, req, bucket, meta)


def _multipart_etag(part_etags: Iterable[str]) -> str:
    """S3's ETag of a multipart object: the MD5 of its parts' MD5s, then `-{parts}`."""
    digests = [bytes.fromhex(etag.strip('"')) for etag in part_etags]
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


def _check_object_checksum(headers: dict[str, str], checksum: dict[str, str] | None) -> None:
    """CompleteMultipartUpload's `x-amz-checksum-<algorithm>` header: the checksum the
    client expects of the whole object (full-object, or for a composite one the checksum of
    the parts' checksums, with or without its `-{parts}`). BadDigest if it differs."""
    sent = [(n, v) for n, v in headers.items() if checksums.is_value_header(n)]
    if not sent:
        return
    if len(sent) > 1:
        raise S3Error("InvalidRequest", "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.")
    name, value = sent[0]
    algorithm = checksums.normalize_algorithm(name[len("x-amz-checksum-"):])
    if checksum is None or checksum["algorithm"] != algorithm:
        raise S3Error(
            "InvalidRequest",
            f"The upload was not created with the {algorithm} checksum algorithm (or a part lacks "
            f"its {algorithm} checksum), so {name} cannot be checked.",
        )
    stored = checksum["value"]
    if value.strip() not in (stored, stored.split("-", 1)[0]):
        raise S3Error("BadDigest", f"The {algorithm.lower()} you specified did not match the calculated checksum.")


async def _completed_already(
    gw: Gateway, req: Request, bucket: Bucket, upload_id: str, requested: list[xmldoc.CompletedPart]
) -> Response:
    """A Complete of an upload that is no more: if it was completed into a version of this
    key with the parts asked for now, answer as that Complete did (S3 does: a client may
    retry a Complete whose answer it lost); else NoSuchUpload."""
    try:
        etag = _multipart_etag(item.etag for item in requested)
    except ValueError:
        etag = None
    made = await gw.run(_version_from_upload, gw, req.bucket, req.key, upload_id)
    if etag is None or made is None or made["etag"] != etag:
        raise S3Error("NoSuchUpload", extra={"UploadId": upload_id})
    return _completed(gw, req, bucket, made)


def _version_from_upload(gw: Gateway, bucket: str, key: str, upload_id: str) -> dict[str, Any] | None:
    """The version of `key` that Complete made of upload `upload_id`, if it still exists
    (the latest looked at first; then up to 1,000 versions of the key)."""
    latest = gw.store.get_version(bucket, key)
    if latest is not None and latest.get("uploadId") == upload_id:
        return latest
    for meta in gw.store.list_versions(bucket, prefix=key, limit=1000):
        if meta["key"] == key and meta.get("uploadId") == upload_id:
            return meta
    return None


def _completed(gw: Gateway, req: Request, bucket: Bucket, meta: dict[str, Any]) -> Response:
    """CompleteMultipartUpload's answer for the version `meta` it made."""
    headers = {}
    if meta["versionId"] != "null":  # none for the null version, as PutObject
        headers["x-amz-version-id"] = meta["versionId"]
    add_expiration(gw, bucket.name, meta, headers)
    # absolute, as AWS answers: the object's URL at the address the client used
    location_url = f"/{quote(req.key, safe='/~')}"
    if not req.virtual_host:  # (a virtual host names the bucket already)
        location_url = f"/{req.bucket}{location_url}"
    if host := req.headers.get("host"):
        location_url = f"{req.scope.get('scheme') or 'http'}://{host}{location_url}"
    cs: dict[str, str] = {}
    kind: str | None = None
    if checksum := meta.get("checksum"):
        cs = {checksum["algorithm"].lower(): checksum["value"]}
        kind = checksum["type"]
    return xml_response(
        xmldoc.complete_upload_xml(location_url, req.bucket, req.key, meta["etag"], cs, kind), headers=headers
    )


async def abort_upload(gw: Gateway, req: Request, p: Principal) -> Response:
    await gw.bucket(req.bucket, p)
    upload = await _upload(gw, req)
    try:
        parts = await gw.run(gw.store.abort_upload, upload["uploadId"])
    except NoSuchUpload as exc:
        raise S3Error("NoSuchUpload", extra={"UploadId": upload["uploadId"]}) from exc
    await gw.free(parts)
    return Response(status=204)


def _abort_headers(gw: Gateway, upload: dict[str, Any]) -> dict[str, str]:
    """x-amz-abort-date/-rule-id when an abort rule of the bucket selects `upload` (see
    lifecycle_config.abort_headers); rules from the per-process cache, as x-amz-expiration."""
    config = gw.lifecycle_of(upload["bucket"])
    if not config:
        return {}
    return abort_headers(config, upload["key"], upload["initiated"], gw.settings.lifecycle_day_seconds)


async def list_parts(gw: Gateway, req: Request, p: Principal) -> Response:
    await gw.bucket(req.bucket, p)
    upload = await _upload(gw, req)
    body = await gw.run(listing.list_parts, gw.store, upload, req.query)
    return xml_response(body, headers=_abort_headers(gw, upload))


async def list_uploads(gw: Gateway, req: Request, p: Principal) -> Response:
    await gw.bucket(req.bucket, p)
    return xml_response(await gw.run(listing.list_multipart_uploads, gw.store, req.bucket, req.query))


__all__ = ["commit_version"]
