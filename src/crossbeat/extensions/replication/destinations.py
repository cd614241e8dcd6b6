"""Where a version is written: another crossbeat gateway, or any S3 endpoint.

`CrossbeatDestination` goes through the destination gateway's internal routes and yields a
true replica: same versionId, sortKey (so the same version order), ETag, lastModified,
user metadata and tags, with replication status REPLICA. Data above the multipart threshold
is sent as several data writes of `part_size` bytes, whose locations are concatenated.

Both write to the bucket the replication rule names (`destination_bucket`: the version's
replicationInfo `destination`), reading from the source bucket (`md["bucket"]`).

`S3Destination` uses standard S3 calls (PutObject / multipart upload / DeleteObject), which
is all a foreign S3 endpoint offers. What differs from a crossbeat destination:
- the destination assigns its own versionId (kept as the backend's dataStoreVersionId) and
  lastModified; version order follows processing order, not the source's sortKey;
- a multipart copy has the destination's part layout, so its ETag may differ;
- a delete marker is a new DeleteObject, not the same marker;
- REPLICA is recorded as user metadata `crossbeat-replication-status: REPLICA` (with
  `crossbeat-source-version-id`), since S3 has no way to set x-amz-replication-status;
- a redelivered version is detected only against the current object (HEAD), so a version
  redelivered after a newer one was written is written again as a new version;
- a user metadata value or a stored header (Content-Type, Cache-Control, ...) that is not
  ASCII travels as one RFC 2047 encoded word (`=?UTF-8?B?...?=`), the form S3 reads and
  returns non-ASCII metadata in: S3 stores the text, a destination that does not decode
  it (crossbeat) stores the encoded word;
- as on S3, the destination bucket must have versioning Enabled (checked once a minute per
  bucket): otherwise the version is FAILED with DstBucketUnversioned;
- the replica's storage class is the source version's own (crossbeat's rule StorageClass
  names sites, not a class); a class the destination refuses (InvalidStorageClass) is left
  out, and the replica gets the destination's default class.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar
from urllib.parse import urlencode

from crossbeat.extensions.replication.errors import ReplicationError, http_error
from crossbeat.extensions.replication.gateway import GatewayClient
from crossbeat.extensions.replication.messages import content_fingerprint
from crossbeat.extensions.replication.settings import SiteSettings
from crossbeat.extensions.replication.status import REPLICA
from crossbeat.s3.header_text import encoded_word, wire_text

T = TypeVar("T")

log = logging.getLogger(__name__)
SMALL_VERSION_BYTES = 1024 * 1024
# how long an S3 destination bucket seen with versioning Enabled is taken to still have it
VERSIONING_CHECKED_S = 60.0


class Destination(Protocol):
    def replicate(self, md: dict[str, Any], source: GatewayClient) -> str:
        """Write version `md` (source metadata) there; returns the dataStoreVersionId."""
        ...

    def ping(self) -> None:
        """Raise an `unavailable` ReplicationError while the site does not answer."""
        ...


_BUCKET_ARN = "arn:aws:s3:::"


def destination_bucket(md: dict[str, Any]) -> str:
    """The bucket version `md` is replicated to: its replicationInfo `destination` (the
    rule's Destination Bucket ARN, "arn:aws:s3:::NAME"), or the source bucket's name for a
    version written before the gateway recorded it. A `destination` that names no bucket
    fails the version (not retryable): guessing would write replicas where the rule does
    not say."""
    arn = (md.get("replicationInfo") or {}).get("destination")
    if not arn:
        return str(md["bucket"])
    name = arn[len(_BUCKET_ARN):] if isinstance(arn, str) and arn.startswith(_BUCKET_ARN) else ""
    if not name or "/" in name:
        raise ReplicationError(f"{md['bucket']}/{md['key']}: replicationInfo destination {arn!r} "
                               "is not an S3 bucket ARN", retryable=False)
    return name


def replica_metadata(md: dict[str, Any], location: list[dict[str, Any]]) -> dict[str, Any]:
    """The destination's copy of source metadata `md`: in the destination bucket, status
    REPLICA, its own locations."""
    replica = copy.deepcopy(md)
    replica["bucket"] = destination_bucket(md)
    replica.pop("revision", None)
    info = dict(replica.get("replicationInfo") or {})
    info.update({"status": REPLICA, "backends": [], "preferredRead": ""})
    replica["replicationInfo"] = info
    replica["location"] = location
    return replica


def refused(exc: ReplicationError) -> bool:
    """Whether the gateway answered `exc` with a 4xx: it refused the request, which changed
    nothing. A transport error or a 5xx leaves open whether the request took effect."""
    return exc.status is not None and 400 <= exc.status < 500


def _simple_etag(md: dict[str, Any]) -> str | None:
    etag = str(md.get("etag") or "").strip('"')
    return etag if etag and "-" not in etag else None


_BUFFERS = threading.local()


def _part_buffer(size: int) -> bytearray:
    """This thread's part buffer, reused from object to object."""
    buffer: bytearray | None = getattr(_BUFFERS, "buffer", None)
    if buffer is None or len(buffer) != size:
        buffer = _BUFFERS.buffer = bytearray(size)
    return buffer


def _exact_chunks(stream: Iterable[bytes], size: int) -> Iterator[bytes]:
    """Re-chunk `stream` into pieces of exactly `size` bytes (the last may be shorter).

    Pieces are collected and joined once per part: growing a bytearray and slicing it
    copied every byte three or four times, which was most of a 64 MiB relay's CPU."""
    pending: list[memoryview] = []
    have = 0
    for chunk in stream:
        view = memoryview(chunk)
        while view.nbytes:
            take = min(size - have, view.nbytes)
            pending.append(view[:take] if take < view.nbytes else view)
            have += take
            view = view[take:]
            if have == size:
                yield b"".join(pending)
                pending, have = [], 0
    if have:
        yield b"".join(pending)


class CrossbeatDestination:
    """A crossbeat gateway written through its internal routes (idempotent per versionId)."""

    def __init__(self, site: SiteSettings, *, threshold: int, part_size: int) -> None:
        self.client = GatewayClient(site)
        self.threshold = threshold
        self.part_size = part_size

    def replicate(self, md: dict[str, Any], source: GatewayClient) -> str:
        bucket, key, version_id = md["bucket"], md["key"], md["versionId"]
        target = destination_bucket(md)
        size = int(md.get("size") or 0)
        # Small versions and delete markers are simply rewritten: creating a version with
        # the same versionId replaces the row and the gateway frees the displaced data, so
        # a redelivery still leaves one identical replica. Checking first would cost a
        # round trip per version; it pays only where a copy is expensive.
        existing = None
        if size > SMALL_VERSION_BYTES:
            existing = self.client.get_metadata(target, key, version_id)
        if existing is not None and self._same_data(existing, md):
            if (existing.get("replicationInfo") or {}).get("status") == REPLICA and (
                content_fingerprint(existing) == content_fingerprint(md)
            ):
                return version_id  # already replicated: redelivery is a no-op
            location = list(existing.get("location") or [])
            written: list[dict[str, Any]] = []
        elif md.get("isDeleteMarker") or size == 0:
            location, written = [], []
        elif existing is None and size <= SMALL_VERSION_BYTES:
            # one request: the gateway stores the bytes and creates the version together
            with source.get_object(bucket, key, version_id) as stream:
                data = b"".join(stream)
            self.client.put_replica(replica_metadata(md, []), data)
            return version_id
        else:
            location = written = self._copy_data(md, source)
        try:
            self.client.put_metadata_create(replica_metadata(md, location))
        except ReplicationError as exc:
            if refused(exc):
                self._discard(written)
            # Otherwise (a lost answer, a 5xx) the version may have been created, pointing
            # at these bytes: deleting them would leave a replica without data. They are
            # left to the gateway's cleanup pass, which frees only what no version uses.
            raise
        return version_id

    def ping(self) -> None:
        self.client.ping()

    def replicate_batch(
        self, versions: list[tuple[dict[str, Any], bytes]]
    ) -> list[ReplicationError | None]:
        """Small versions and delete markers (source metadata, all their bytes) in one
        request: None or the error of each. Redelivery is harmless, as in `replicate`."""
        return self.client.batch_replica([(replica_metadata(md, []), data) for md, data in versions])

    @staticmethod
    def _same_data(existing: dict[str, Any], md: dict[str, Any]) -> bool:
        if bool(existing.get("isDeleteMarker")) != bool(md.get("isDeleteMarker")):
            return False
        if existing.get("etag") != md.get("etag") or existing.get("size") != md.get("size"):
            return False
        return bool(existing.get("location")) or not int(md.get("size") or 0)

    def _copy_data(self, md: dict[str, Any], source: GatewayClient) -> list[dict[str, Any]]:
        bucket, key, version_id = md["bucket"], md["key"], md["versionId"]
        target = destination_bucket(md)
        owner = md.get("owner") if isinstance(md.get("owner"), str) else None
        size = int(md.get("size") or 0)
        locations: list[dict[str, Any]] = []
        try:
            with source.get_object(bucket, key, version_id) as stream:
                if size <= self.threshold:
                    digest = hashlib.md5(usedforsecurity=False)
                    counted = _counting(stream, digest)
                    locs, md5 = self.client.put_data(target, key, counted, size, owner)
                    locations.extend(locs)
                    self._verify(md, digest.hexdigest(), md5, size, sum(_sizes(locs)))
                else:
                    buffer = _part_buffer(self.part_size)
                    while n := stream.readinto(buffer):
                        locs, _ = self.client.put_data(target, key, memoryview(buffer)[:n], n, owner)
                        locations.extend(locs)
                    total = sum(_sizes(locations))
                    if total != size:
                        raise ReplicationError(
                            f"{bucket}/{key}: copied {total} bytes, expected {size}", retryable=True
                        )
        except BaseException:
            self._discard(locations)
            raise
        return locations

    @staticmethod
    def _verify(md: dict[str, Any], sent_md5: str, stored_md5: str, size: int, stored: int) -> None:
        if stored != size:
            raise ReplicationError(f"stored {stored} bytes, expected {size}", retryable=True)
        if stored_md5 and stored_md5 != sent_md5:
            raise ReplicationError("data corrupted in transit (md5)", retryable=True)
        etag = _simple_etag(md)
        if etag is not None and sent_md5 != etag:
            raise ReplicationError(
                f"source data md5 {sent_md5} does not match its ETag {etag}", retryable=True
            )

    def _discard(self, locations: list[dict[str, Any]]) -> None:
        if not locations:
            return
        # An orphan on the destination is garbage, never a wrong replica: ignore failures.
        with contextlib.suppress(ReplicationError):
            self.client.batch_delete(locations)

    def close(self) -> None:
        self.client.close()


def _check_size(md: dict[str, Any], read: int) -> None:
    """A retryable ReplicationError unless `read` bytes are the size of version `md`: a
    source read cut short, or one that decoded the object's Content-Encoding, would
    otherwise be written as the replica."""
    size = int(md.get("size") or 0)
    if read != size:
        raise ReplicationError(f"{md['bucket']}/{md['key']}: read {read} bytes at the source, "
                               f"expected {size}", retryable=True)


def _sizes(locations: list[dict[str, Any]]) -> Iterator[int]:
    return (int(loc.get("size") or 0) for loc in locations)


def _counting(stream: Iterable[bytes], digest: Any) -> Iterator[bytes]:
    for chunk in stream:
        digest.update(chunk)
        yield chunk


# The headers a crossbeat version keeps in its `systemHeaders` (crossbeat.s3.objectmeta's
# SYSTEM_HEADERS) that S3 keeps with an object, and AWS's replication copies to the replica.
# Listed rather than all of systemHeaders: a header the gateway comes to store is sent on
# once someone has checked that a foreign endpoint takes it on PutObject.
STORED_HEADERS = (
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
    "x-amz-website-redirect-location",
)
STORAGE_CLASS = "x-amz-storage-class"
# boto3 builds a request's headers from typed parameters. Expires is a timestamp there, so
# an Expires that S3 kept as it was sent ("0", any text; boto3 reads it as ExpiresString)
# would be rewritten, or refused before leaving. The stored headers are passed to a call in
# this parameter instead: the handlers below take it out before boto3 validates the others
# and add it, as given, to the request before it is signed.
_RAW_HEADERS = "CrossbeatHeaders"
_RAW_HEADER_CALLS = ("PutObject", "CreateMultipartUpload")


def _take_raw_headers(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    context[_RAW_HEADERS] = params.pop(_RAW_HEADERS, None) or {}


def _add_raw_headers(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    params["headers"].update(context.get(_RAW_HEADERS) or {})


def ascii_header(value: str) -> str:
    """`value` as an S3 request can carry it: ASCII as it is, other text (see `wire_text`)
    as one RFC 2047 encoded word of its UTF-8, `=?UTF-8?B?...?=`, as S3 represents non-ASCII
    metadata. Unfolded: a header value holds no line break."""
    return value if value.isascii() else encoded_word(wire_text(value))


class S3Destination:
    """Any S3 endpoint through standard calls (see the module docstring for what differs)."""

    def __init__(self, site: SiteSettings, *, threshold: int, part_size: int) -> None:
        import boto3
        from botocore.config import Config

        self.client = boto3.client(
            "s3",
            endpoint_url=site.endpoint,
            aws_access_key_id=site.access_key,
            aws_secret_access_key=site.secret_key.get_secret_value(),
            region_name=site.region,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1},
                max_pool_connections=64,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )
        for call in _RAW_HEADER_CALLS:
            self.client.meta.events.register(f"before-parameter-build.s3.{call}", _take_raw_headers)
            self.client.meta.events.register(f"before-call.s3.{call}", _add_raw_headers)
        self.threshold = threshold
        self.part_size = part_size
        # (bucket, storage class) the destination answered InvalidStorageClass to: not asked
        # again, each version would cost a refused request (for the life of the process)
        self._refused_classes: set[tuple[str, str]] = set()
        # bucket -> when its versioning was last seen Enabled (monotonic): asked again after
        # VERSIONING_CHECKED_S, and at once while it is not
        self._versioned: dict[str, float] = {}
        self._versioned_lock = threading.Lock()

    def replicate(self, md: dict[str, Any], source: GatewayClient) -> str:
        """Write version `md` as a new version at the destination; its versionId there.

        Besides the bytes, the replica gets the version's Content-Type, stored headers
        (`STORED_HEADERS`, as stored), storage class, user metadata (with the REPLICA
        markers) and tags; values that are not ASCII as `ascii_header` encodes them."""
        return self._call(lambda: self._replicate(md, source))

    def ping(self) -> None:
        self._call(self.client.list_buckets)

    def _require_versioning(self, bucket: str) -> None:
        """Refuse (DstBucketUnversioned, not retryable: FAILED until `replication retry`) a
        destination bucket whose versioning is not Enabled, as S3 replication does and the
        crossbeat destination does: there a replicated delete would remove the object
        itself, and each replicated version would overwrite the one before."""
        with self._versioned_lock:
            seen = self._versioned.get(bucket)
        if seen is not None and time.monotonic() - seen < VERSIONING_CHECKED_S:
            return
        status = self.client.get_bucket_versioning(Bucket=bucket).get("Status") or "never enabled"
        if status != "Enabled":
            with self._versioned_lock:
                self._versioned.pop(bucket, None)
            raise ReplicationError(
                f"DstBucketUnversioned: the destination bucket {bucket!r} has versioning {status}: "
                "replicas need it Enabled (then retry with `crossbeat replication retry`)",
                retryable=False,
            )
        with self._versioned_lock:
            self._versioned[bucket] = time.monotonic()

    @staticmethod
    def _call(fn: Callable[[], T]) -> T:
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            HTTPClientError,
            ParamValidationError,
        )
        from botocore.exceptions import ConnectionError as BotoConnectionError

        try:
            return fn()
        except ClientError as exc:
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500))
            raise http_error("s3 destination", status, str(exc)) from exc
        except (ParamValidationError, UnicodeError) as exc:
            # boto3 would not build the request from this version: nothing was sent, and
            # the same version fails the same way however often it is tried
            raise ReplicationError(f"s3 destination: the version cannot be sent as an S3 "
                                   f"request: {exc}", retryable=False) from exc
        except BotoCoreError as exc:
            # refused, timed out, cut off: the site, not this request, is the trouble
            unavailable = isinstance(exc, (BotoConnectionError, HTTPClientError))
            raise ReplicationError(f"s3 destination: {exc}", retryable=True,
                                   unavailable=unavailable) from exc

    def _replicate(self, md: dict[str, Any], source: GatewayClient) -> str:
        bucket, key, version_id = md["bucket"], md["key"], md["versionId"]
        target = destination_bucket(md)
        self._require_versioning(target)
        if md.get("isDeleteMarker"):
            resp = self.client.delete_object(Bucket=target, Key=key)
            return str(resp.get("VersionId") or "")
        current = self._head(target, key)
        if current is not None and current.get("Metadata", {}).get(
            "crossbeat-source-version-id"
        ) == version_id:
            return str(current.get("VersionId") or "")
        extra = self._object_params(md)
        size = int(md.get("size") or 0)
        with source.get_object(bucket, key, version_id) as stream:
            if size <= self.threshold:
                body = b"".join(stream)
                _check_size(md, len(body))
                out = self._create(self.client.put_object, target, key, extra, Body=body)
                return str(out.get("VersionId") or "")
            upload = self._create(self.client.create_multipart_upload, target, key, extra)
            upload_id = upload["UploadId"]
            try:
                parts, read = [], 0
                for number, part in enumerate(_exact_chunks(stream, self.part_size), start=1):
                    read += len(part)
                    done = self.client.upload_part(
                        Bucket=target, Key=key, UploadId=upload_id, PartNumber=number, Body=part
                    )
                    parts.append({"PartNumber": number, "ETag": done["ETag"]})
                _check_size(md, read)
                out = self.client.complete_multipart_upload(
                    Bucket=target, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
                )
            except BaseException:
                self.client.abort_multipart_upload(Bucket=target, Key=key, UploadId=upload_id)
                raise
            return str(out.get("VersionId") or "")

    @staticmethod
    def _object_params(md: dict[str, Any]) -> dict[str, Any]:
        """The parameters of the call that creates the replica of `md` (PutObject or
        CreateMultipartUpload), besides Bucket, Key and Body."""
        stored = md.get("systemHeaders") or {}
        headers = {name: ascii_header(stored[name]) for name in STORED_HEADERS if stored.get(name)}
        # The version's own class, never replicationInfo's storageClass: in crossbeat a
        # rule's StorageClass names the destination sites ("b,c"), which no S3 endpoint
        # takes as a class. STANDARD is not stored, and is every endpoint's default.
        if stored.get(STORAGE_CLASS):
            headers[STORAGE_CLASS] = stored[STORAGE_CLASS]
        extra: dict[str, Any] = {
            "Metadata": {
                **{name: ascii_header(value) for name, value in (md.get("userMetadata") or {}).items()},
                "crossbeat-replication-status": REPLICA,
                "crossbeat-source-version-id": md["versionId"],
            },
            _RAW_HEADERS: headers,
        }
        if md.get("contentType"):
            extra["ContentType"] = ascii_header(md["contentType"])
        if md.get("tags"):
            extra["Tagging"] = urlencode(md["tags"])
        return extra

    def _create(
        self, call: Callable[..., dict[str, Any]], bucket: str, key: str, extra: dict[str, Any],
        **more: Any,
    ) -> dict[str, Any]:
        """`call` (put_object or create_multipart_upload) with `extra`; again without the
        storage class if the destination refuses that class, as an endpoint with fewer
        classes than AWS does (MinIO without tiers, a Ceph zone without that placement).
        The class is only a label at the source: a replica in the destination's default
        class beats none."""
        from botocore.exceptions import ClientError

        headers: dict[str, str] = extra[_RAW_HEADERS]
        storage_class = headers.get(STORAGE_CLASS)
        if storage_class is not None and (bucket, storage_class) in self._refused_classes:
            headers = {k: v for k, v in headers.items() if k != STORAGE_CLASS}
            storage_class = None
        try:
            return call(Bucket=bucket, Key=key, **{**extra, _RAW_HEADERS: headers}, **more)
        except ClientError as exc:
            if storage_class is None or exc.response.get("Error", {}).get("Code") != "InvalidStorageClass":
                raise
            log.warning("s3 destination: bucket %s refuses storage class %s; its replicas "
                        "there get the default class", bucket, storage_class)
            self._refused_classes.add((bucket, storage_class))
        headers = {k: v for k, v in headers.items() if k != STORAGE_CLASS}
        return call(Bucket=bucket, Key=key, **{**extra, _RAW_HEADERS: headers}, **more)

    def _head(self, bucket: str, key: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            head: dict[str, Any] = self.client.head_object(Bucket=bucket, Key=key)
            return head
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return None
            raise

    def close(self) -> None:
        self.client.close()


def make_destination(site: SiteSettings, *, threshold: int, part_size: int) -> Destination:
    if site.type == "s3":
        return S3Destination(site, threshold=threshold, part_size=part_size)
    return CrossbeatDestination(site, threshold=threshold, part_size=part_size)
