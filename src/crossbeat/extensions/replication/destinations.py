"""Where a version is written: another crossbeat gateway, or any S3 endpoint.

`CrossbeatDestination` goes through the destination gateway's internal routes and yields a
true replica: same versionId, sortKey (so the same version order), ETag, lastModified,
user metadata and tags, with replication status REPLICA. Data above the multipart threshold
is sent as several data writes of `part_size` bytes, whose locations are concatenated.

`S3Destination` uses standard S3 calls (PutObject / multipart upload / DeleteObject), which
is all a foreign S3 endpoint offers. What differs from a crossbeat destination:
- the destination assigns its own versionId (kept as the backend's dataStoreVersionId) and
  lastModified; version order follows processing order, not the source's sortKey;
- a multipart copy has the destination's part layout, so its ETag may differ;
- a delete marker is a new DeleteObject, not the same marker;
- REPLICA is recorded as user metadata `crossbeat-replication-status: REPLICA` (with
  `crossbeat-source-version-id`), since S3 has no way to set x-amz-replication-status;
- a redelivered version is detected only against the current object (HEAD), so a version
  redelivered after a newer one was written is written again as a new version.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar
from urllib.parse import urlencode

from crossbeat.extensions.replication.errors import ReplicationError, http_error
from crossbeat.extensions.replication.gateway import GatewayClient
from crossbeat.extensions.replication.messages import content_fingerprint
from crossbeat.extensions.replication.settings import SiteSettings
from crossbeat.extensions.replication.status import REPLICA

T = TypeVar("T")

SMALL_VERSION_BYTES = 1024 * 1024


class Destination(Protocol):
    def replicate(self, md: dict[str, Any], source: GatewayClient) -> str:
        """Write version `md` (source metadata) there; returns the dataStoreVersionId."""
        ...

    def ping(self) -> None:
        """Raise an `unavailable` ReplicationError while the site does not answer."""
        ...


def replica_metadata(md: dict[str, Any], location: list[dict[str, Any]]) -> dict[str, Any]:
    """The destination's copy of source metadata `md`: status REPLICA, its own locations."""
    replica = copy.deepcopy(md)
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
        size = int(md.get("size") or 0)
        # Small versions and delete markers are simply rewritten: creating a version with
        # the same versionId replaces the row and the gateway frees the displaced data, so
        # a redelivery still leaves one identical replica. Checking first would cost a
        # round trip per version; it pays only where a copy is expensive.
        existing = None
        if size > SMALL_VERSION_BYTES:
            existing = self.client.get_metadata(bucket, key, version_id)
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
        size = int(md.get("size") or 0)
        locations: list[dict[str, Any]] = []
        try:
            with source.get_object(bucket, key, version_id) as stream:
                if size <= self.threshold:
                    digest = hashlib.md5(usedforsecurity=False)
                    counted = _counting(stream, digest)
                    locs, md5 = self.client.put_data(bucket, key, counted, size)
                    locations.extend(locs)
                    self._verify(md, digest.hexdigest(), md5, size, sum(_sizes(locs)))
                else:
                    buffer = _part_buffer(self.part_size)
                    while n := stream.readinto(buffer):
                        locs, _ = self.client.put_data(bucket, key, memoryview(buffer)[:n], n)
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


def _sizes(locations: list[dict[str, Any]]) -> Iterator[int]:
    return (int(loc.get("size") or 0) for loc in locations)


def _counting(stream: Iterable[bytes], digest: Any) -> Iterator[bytes]:
    for chunk in stream:
        digest.update(chunk)
        yield chunk


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
        self.threshold = threshold
        self.part_size = part_size

    def replicate(self, md: dict[str, Any], source: GatewayClient) -> str:
        return self._call(lambda: self._replicate(md, source))

    def ping(self) -> None:
        self._call(self.client.list_buckets)

    @staticmethod
    def _call(fn: Callable[[], T]) -> T:
        from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        try:
            return fn()
        except ClientError as exc:
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500))
            raise http_error("s3 destination", status, str(exc)) from exc
        except BotoCoreError as exc:
            # refused, timed out, cut off: the site, not this request, is the trouble
            unavailable = isinstance(exc, (BotoConnectionError, HTTPClientError))
            raise ReplicationError(f"s3 destination: {exc}", retryable=True,
                                   unavailable=unavailable) from exc

    def _replicate(self, md: dict[str, Any], source: GatewayClient) -> str:
        bucket, key, version_id = md["bucket"], md["key"], md["versionId"]
        if md.get("isDeleteMarker"):
            resp = self.client.delete_object(Bucket=bucket, Key=key)
            return str(resp.get("VersionId") or "")
        current = self._head(bucket, key)
        if current is not None and current.get("Metadata", {}).get(
            "crossbeat-source-version-id"
        ) == version_id:
            return str(current.get("VersionId") or "")
        extra: dict[str, Any] = {
            "Metadata": {
                **(md.get("userMetadata") or {}),
                "crossbeat-replication-status": REPLICA,
                "crossbeat-source-version-id": version_id,
            },
        }
        if md.get("contentType"):
            extra["ContentType"] = md["contentType"]
        if md.get("tags"):
            extra["Tagging"] = urlencode(md["tags"])
        size = int(md.get("size") or 0)
        with source.get_object(bucket, key, version_id) as stream:
            if size <= self.threshold:
                body = b"".join(stream)
                out = self.client.put_object(Bucket=bucket, Key=key, Body=body, **extra)
                return str(out.get("VersionId") or "")
            upload = self.client.create_multipart_upload(Bucket=bucket, Key=key, **extra)
            upload_id = upload["UploadId"]
            try:
                parts = []
                for number, part in enumerate(_exact_chunks(stream, self.part_size), start=1):
                    done = self.client.upload_part(
                        Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=part
                    )
                    parts.append({"PartNumber": number, "ETag": done["ETag"]})
                out = self.client.complete_multipart_upload(
                    Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
                )
            except BaseException:
                self.client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
                raise
            return str(out.get("VersionId") or "")

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
