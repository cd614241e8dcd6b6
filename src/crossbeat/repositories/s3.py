"""A repository over any S3 endpoint (boto3).

Each object is one S3 object `{prefix}{objectId}`: written with one PUT up to the part size,
as a multipart upload above it (so memory stays at one part), read with ranged GETs and
streamed. Integrity in transit and at rest is the endpoint's business (boto3 checksums, the
endpoint's own); a body shorter than announced is an error, never silently short data.

Seed 003's lock flag is user metadata `x-amz-meta-crossbeat-locked: true`, changed with a
server-side copy onto the object itself (objects up to 5 GiB). GET and HEAD responses carry
it, so honouring it costs reads nothing extra. Credentials left unset fall back to boto3's
default credential chain.

What the backend holds is checked, not trusted: the ETag the backend answered to our write
is recorded in the location and reads ask for that object only (If-Match; a lock change
copies the object, which may change its ETag, and keeps the first one in
`x-amz-meta-crossbeat-etag` so that the copy is still recognised); a response of another
length than the location records is refused before its first byte. A backend that does not
answer costs a bounded time (the settings' timeouts and attempts) and raises
`RepositoryUnavailable`; the repository's I/O runs on its own threads (`io_executor`).

A repository opened with an `owner` (the data dir's id) holds an ownership marker,
`{prefix}.crossbeat-repository`: two gateways on one bucket and prefix would each take the
other's objects for leftovers. The first use writes it (or adopts a repository from before
markers, saying so); a marker naming another owner refuses every use of the repository.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from crossbeat.repositories.base import (
    ObjectStat,
    ObjectWriter,
    Repository,
    orphans_plausible,
    refuse_orphans,
)
from crossbeat.repositories.errors import (
    CorruptData,
    NoSuchData,
    RepositoryError,
    RepositoryUnavailable,
)
from crossbeat.repositories.io import BoundedExecutor
from crossbeat.repositories.location import Location
from crossbeat.repositories.object_ids import (
    check_object_id,
    is_object_id,
    new_object_id,
    object_id_time,
)
from crossbeat.repositories.settings import DEFAULT_PART_SIZE

if TYPE_CHECKING:
    from crossbeat.repositories.settings import RepositorySettings

log = logging.getLogger(__name__)

LOCK_META = "crossbeat-locked"
ETAG_META = "crossbeat-etag"  # the ETag of our write, kept across lock changes' copies
MARKER = ".crossbeat-repository"  # under the prefix: not an objectId, so never listed as data
READ_CHUNK = 1024 * 1024
_ABSENT = {"NoSuchKey", "404", "NotFound", "NoSuchUpload"}
_REPLACED = {"PreconditionFailed", "412"}
# Answers that say "not now" rather than "no": the client may retry them
_BUSY = {"SlowDown", "ServiceUnavailable", "RequestTimeout", "Throttling", "ThrottlingException",
         "RequestLimitExceeded", "TooManyRequests", "InternalError"}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def unavailable(exc: Exception) -> bool:
    """Whether `exc` says the backend is down, overloaded or slow (retryable), rather than
    that the request or the data is wrong."""
    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        return status >= 500 or status == 429 or _code(exc) in _BUSY
    # no connection, a connect or read timeout, a connection closed mid-answer
    return isinstance(exc, BotoConnectionError | HTTPClientError)


class S3Repository(Repository):
    """Objects stored as `{prefix}{objectId}` in one bucket of an S3 endpoint."""

    def __init__(
        self,
        name: str,
        client: Any,
        bucket: str,
        *,
        prefix: str = "",
        part_size: int = DEFAULT_PART_SIZE,
        owner: str | None = None,
        io_threads: int = 8,
        io_queue: int = 64,
    ) -> None:
        if part_size < 5 * 1024 * 1024:
            raise RepositoryError("S3 parts must be at least 5 MiB")
        self.name = name
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.part_size = part_size
        self._io = BoundedExecutor(name, io_threads, io_queue)
        self.io_executor = self._io
        # the ownership marker: checked (and written if absent) once, on first use
        self.owner = owner
        self._claimed = owner is None
        self._foreign: str | None = None  # why the marker forbids using the repository
        self._claim_lock = threading.Lock()

    @classmethod
    def from_settings(
        cls, name: str, settings: RepositorySettings, owner: str | None = None
    ) -> S3Repository:
        assert settings.bucket is not None  # checked by the settings model
        try:
            client = boto3.session.Session().client(
                "s3",
                endpoint_url=settings.endpoint_url,
                region_name=settings.region,
                aws_access_key_id=settings.access_key,
                aws_secret_access_key=(
                    settings.secret_key.get_secret_value() if settings.secret_key else None
                ),
                config=Config(
                    s3={"addressing_style": "path"},
                    connect_timeout=settings.connect_timeout_s,
                    read_timeout=settings.read_timeout_s,
                    retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts},
                    # one connection per I/O thread, and a few for the start-up pass
                    max_pool_connections=settings.io_threads + 2,
                ),
            )
        except (ValueError, BotoCoreError) as exc:  # a malformed endpoint_url or region
            raise RepositoryError(
                f"s3 repository {name!r}: cannot use endpoint_url {settings.endpoint_url!r}: {exc}"
            ) from exc
        return cls(
            name,
            client,
            settings.bucket,
            prefix=settings.prefix,
            part_size=settings.part_size,
            owner=owner,
            io_threads=settings.io_threads,
            io_queue=settings.io_queue,
        )

    def object_key(self, data_key: str) -> str:
        return self.prefix + check_object_id(data_key)

    def _fail(self, what: str, data_key: str, exc: Exception) -> RepositoryError:
        where = f"s3 repository {self.name!r} (bucket {self.bucket!r})"
        if unavailable(exc):
            return RepositoryUnavailable(f"{where} does not answer: {what} {data_key!r}: {exc}")
        return RepositoryError(f"{where}: {what} {data_key!r}: {exc}")

    # -- the ownership marker -------------------------------------------------------------

    def claim(self) -> None:
        """Check the ownership marker, writing it if there is none; idempotent and cheap
        once done. `RepositoryError` naming both owners if it names another one (for good:
        that is configuration to fix), `RepositoryUnavailable` if the backend does not
        answer (tried again on the next use)."""
        if self._claimed:
            return
        with self._claim_lock:
            if self._foreign is not None:
                raise RepositoryError(self._foreign)
            if self._claimed:
                return
            found = self._marker_owner()
            if found is None:
                self._write_marker()
                found = self._marker_owner()  # two first starts at once: the first write wins
            if found != self.owner:
                self._foreign = (
                    f"s3 repository {self.name!r}: bucket {self.bucket!r} prefix {self.prefix!r} "
                    f"belongs to another gateway (data dir id {found}), not to this one "
                    f"(data dir id {self.owner}): two gateways sharing it would delete each "
                    "other's objects. Give each its own bucket or prefix; if that gateway is "
                    f"gone for good, delete {self.prefix}{MARKER} from the bucket."
                )
                log.error("%s", self._foreign)
                raise RepositoryError(self._foreign)
            self._claimed = True

    def _marker_owner(self) -> str | None:
        key = self.prefix + MARKER
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if _code(exc) in _ABSENT:
                return None
            raise self._fail("read the ownership marker", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("read the ownership marker", key, exc) from exc
        try:
            owner = json.loads(body)["owner"]
        except (ValueError, KeyError, TypeError) as exc:
            raise RepositoryError(
                f"s3 repository {self.name!r}: unreadable ownership marker {key!r}: {exc}"
            ) from exc
        return str(owner)

    def _write_marker(self) -> None:
        key = self.prefix + MARKER
        body = json.dumps({"owner": self.owner}).encode()
        try:
            had_objects = next(iter(self._list()), None) is not None
            try:
                # only if there is none: of two gateways starting at once, the second gets
                # 412 and then reads the first one's marker (an unconditional write let
                # each read back its own, and both adopted the prefix)
                self.client.put_object(Bucket=self.bucket, Key=key, Body=body,
                                       ContentType="application/json", IfNoneMatch="*")
            except ClientError as exc:
                if _code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                    return  # another gateway's marker is there: claim() reads it
                if _code(exc) not in ("NotImplemented", "InvalidArgument"):
                    raise
                # a backend without conditional writes: unconditional, the race left open
                self.client.put_object(Bucket=self.bucket, Key=key, Body=body,
                                       ContentType="application/json")
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("write the ownership marker", key, exc) from exc
        if had_objects:
            log.warning(
                "s3 repository %r: bucket %r prefix %r holds objects but no ownership marker "
                "(written before markers): adopted by this gateway (data dir id %s)",
                self.name, self.bucket, self.prefix, self.owner,
            )

    # -- the Repository contract ---------------------------------------------------------

    def writer(self, data_key: str | None = None, *, locked: bool = False) -> S3Writer:
        self.claim()
        if data_key is None:
            data_key = new_object_id()
        elif self.stat(data_key) is not None:
            raise RepositoryError(f"object {data_key!r} already exists in repository {self.name!r}")
        return S3Writer(self, data_key, locked)

    def read(self, data_key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        self.claim()
        key = self.object_key(data_key)
        if start < 0 or (end is not None and end < start):
            raise RepositoryError(f"invalid range [{start}, {end}) for object {data_key!r}")
        if end == start:  # an empty range: S3 cannot express it, only check existence
            size = self.size(data_key)
            if size is None:
                raise NoSuchData(self.name, data_key)
            if start > size:
                raise RepositoryError(f"invalid range start {start} for size {size}")
            return iter(())
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if start or end is not None:
            args["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            response = self.client.get_object(**args)
        except ClientError as exc:
            if _code(exc) in _ABSENT:
                raise NoSuchData(self.name, data_key) from None
            if _code(exc) == "InvalidRange":
                size = self.size(data_key)
                if size is None:
                    raise NoSuchData(self.name, data_key) from None
                if start == size:
                    return iter(())
                raise RepositoryError(
                    f"invalid range start {start} for object {data_key!r} of size {size}"
                ) from None
            raise self._fail("read", data_key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("read", data_key, exc) from exc
        if response.get("Metadata", {}).get(LOCK_META) == "true":
            response["Body"].close()
            raise NoSuchData(self.name, data_key, "locked")
        return self._stream(response, data_key, response["ContentLength"])

    def read_location(self, location: Location, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """`read`, refused before any byte unless the backend's answer is the object we
        wrote (If-Match on the recorded ETag, when there is one) and exactly as long as the
        location records for the range; a stream cut short later raises."""
        self.claim()
        data_key = location.dataKey
        key = self.object_key(data_key)
        stop = location.size if end is None else min(end, location.size)
        if start < 0 or start > stop:
            raise RepositoryError(f"invalid range [{start}, {end}) for object {data_key!r}")
        if start == stop:
            return self.read(data_key, start, start)
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if start or stop != location.size:
            # (the whole object is asked for without a range: its length is then checked too)
            args["Range"] = f"bytes={start}-{stop - 1}"
        etag = location.etag
        for attempt in range(2):
            if etag is not None:
                args["IfMatch"] = etag
            try:
                response = self.client.get_object(**args)
                break
            except ClientError as exc:
                code = _code(exc)
                if code in _ABSENT:
                    raise NoSuchData(self.name, data_key) from None
                if code == "InvalidRange":  # shorter than `start`
                    raise self._wrong_size(location) from None
                if code in _REPLACED and etag is not None and attempt == 0:
                    etag = self._same_write(location)
                    continue
                raise self._fail("read", data_key, exc) from exc
            except BotoCoreError as exc:
                raise self._fail("read", data_key, exc) from exc
        else:  # pragma: no cover - the second attempt breaks or raises
            raise AssertionError("unreachable")
        if response.get("Metadata", {}).get(LOCK_META) == "true":
            response["Body"].close()
            raise NoSuchData(self.name, data_key, "locked")
        announced = response["ContentLength"]
        if announced != stop - start:
            response["Body"].close()
            raise CorruptData(
                self.name, data_key, None,
                f"the backend answers {announced} bytes where the location records {stop - start} "
                f"(bytes {start}-{stop - 1} of {location.size}): the object in bucket "
                f"{self.bucket!r} was changed behind this gateway",
            )
        return self._stream(response, data_key, announced)

    def _same_write(self, location: Location) -> str:
        """The backend refused our ETag: the ETag of the object now there if it is still our
        write (a lock change copied it, see ETAG_META), else `CorruptData`."""
        head = self._head(location.dataKey)
        if head is None:
            raise NoSuchData(self.name, location.dataKey)
        if head.get("Metadata", {}).get(ETAG_META) == location.etag:
            return str(head["ETag"])
        raise CorruptData(
            self.name, location.dataKey, None,
            f"the object in bucket {self.bucket!r} was replaced behind this gateway: its ETag is "
            f"{head.get('ETag')}, the one written was {location.etag}",
        )

    def _wrong_size(self, location: Location) -> RepositoryError:
        size = self.size(location.dataKey)
        if size is None:
            return NoSuchData(self.name, location.dataKey)
        return CorruptData(
            self.name, location.dataKey, None,
            f"the object in bucket {self.bucket!r} holds {size} bytes where the location records "
            f"{location.size}: it was changed behind this gateway",
        )

    def _stream(self, response: dict[str, Any], data_key: str, expected: int) -> Iterator[bytes]:
        body = response["Body"]
        received = 0
        try:
            for piece in body.iter_chunks(READ_CHUNK):
                received += len(piece)
                if received > expected:
                    raise CorruptData(self.name, data_key, None, f"more than the {expected} bytes announced")
                yield piece
        except BotoCoreError as exc:  # includes a body shorter than Content-Length
            raise self._fail("read", data_key, exc) from exc
        finally:
            body.close()
        if received != expected:
            raise CorruptData(
                self.name, data_key, None, f"the backend sent {received} bytes of the {expected} announced"
            )

    def _head(self, data_key: str) -> dict[str, Any] | None:
        self.claim()
        try:
            head: dict[str, Any] = self.client.head_object(
                Bucket=self.bucket, Key=self.object_key(data_key)
            )
            return head
        except ClientError as exc:
            if _code(exc) in _ABSENT:
                return None
            raise self._fail("head", data_key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("head", data_key, exc) from exc

    def size(self, data_key: str) -> int | None:
        stat = self.stat(data_key)
        return None if stat is None or stat.locked else stat.size

    def stat(self, data_key: str) -> ObjectStat | None:
        head = self._head(data_key)
        if head is None:
            return None
        locked = head.get("Metadata", {}).get(LOCK_META) == "true"
        return ObjectStat(data_key, head["ContentLength"], locked, head["LastModified"].timestamp())

    def delete(self, data_key: str) -> None:
        self.claim()
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.object_key(data_key))
        except ClientError as exc:
            if _code(exc) not in _ABSENT:
                raise self._fail("delete", data_key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("delete", data_key, exc) from exc

    def lock(self, data_key: str) -> None:
        self._set_locked(data_key, True)

    def unlock(self, data_key: str) -> None:
        self._set_locked(data_key, False)

    def _set_locked(self, data_key: str, locked: bool) -> None:
        head = self._head(data_key)
        if head is None:
            raise NoSuchData(self.name, data_key)
        metadata = dict(head.get("Metadata", {}))
        if (metadata.get(LOCK_META) == "true") == locked:
            return
        metadata.pop(LOCK_META, None)
        # the copy may get another ETag (one of a multipart object does): keep our write's
        metadata.setdefault(ETAG_META, str(head.get("ETag", "")))
        if locked:
            metadata[LOCK_META] = "true"
        key = self.object_key(data_key)
        try:
            self.client.copy_object(
                Bucket=self.bucket,
                Key=key,
                CopySource={"Bucket": self.bucket, "Key": key},
                Metadata=metadata,
                MetadataDirective="REPLACE",
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("lock" if locked else "unlock", data_key, exc) from exc

    def _list(self) -> Iterator[tuple[str, float]]:
        """(objectId, last modified) of every object under the prefix."""
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
                for item in page.get("Contents", []):
                    data_key = item["Key"][len(self.prefix) :]
                    if is_object_id(data_key):
                        yield data_key, item["LastModified"].timestamp()
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list", self.prefix, exc) from exc

    def keys(self) -> Iterator[str]:
        self.claim()
        for data_key, _ in self._list():
            yield data_key

    def cleanup(self, referenced: Callable[[str], bool], older_than_s: float = 3600) -> list[str]:
        self.claim()  # never in a repository that another gateway owns
        removed: list[str] = []
        cutoff = time.time() - older_than_s
        paginator = self.client.get_paginator("list_multipart_uploads")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
                for upload in page.get("Uploads", []):
                    data_key = upload["Key"][len(self.prefix) :]
                    # Our ids carry their creation time; trust the later of it and the
                    # endpoint's clock (some endpoints report a fixed Initiated).
                    started = max(upload["Initiated"].timestamp(), object_id_time(data_key) or 0.0)
                    if is_object_id(data_key) and started <= cutoff:
                        self.client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
                        removed.append(data_key)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("cleanup", self.prefix, exc) from exc
        committed = list(self._list())
        unreferenced = [key for key, modified in committed if modified <= cutoff and not referenced(key)]
        if not orphans_plausible(len(unreferenced), len(committed)):
            refuse_orphans(self.name, len(unreferenced), len(committed))
            return removed
        for data_key in unreferenced:
            self.delete(data_key)
            removed.append(data_key)
        return removed

    def close(self) -> None:
        self._io.shutdown()
        self.client.close()


class S3Writer(ObjectWriter):
    """One PUT for objects up to the part size, a multipart upload above it."""

    def __init__(self, repo: S3Repository, data_key: str, locked: bool) -> None:
        self.repo = repo
        self.data_key = data_key
        self._key = repo.object_key(data_key)
        self._metadata = {LOCK_META: "true"} if locked else {}
        self._buffer = bytearray()
        self._size = 0
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._state = "open"

    @property
    def bytes_written(self) -> int:
        return self._size

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._state != "open":
            raise RepositoryError(f"writer for {self.data_key!r} is {self._state}")
        view = memoryview(data).cast("B")
        self._size += len(view)
        part_size = self.repo.part_size
        pos = 0
        try:
            while pos < len(view):
                take = min(part_size - len(self._buffer), len(view) - pos)
                self._buffer += view[pos : pos + take]
                pos += take
                if len(self._buffer) == part_size:
                    self._upload_part()
        except (ClientError, BotoCoreError) as exc:
            self.abort()
            raise self.repo._fail("write", self.data_key, exc) from exc

    def _upload_part(self) -> None:
        client, bucket = self.repo.client, self.repo.bucket
        if self._upload_id is None:
            created = client.create_multipart_upload(
                Bucket=bucket, Key=self._key, Metadata=self._metadata
            )
            self._upload_id = created["UploadId"]
        number = len(self._parts) + 1
        response = client.upload_part(
            Bucket=bucket,
            Key=self._key,
            UploadId=self._upload_id,
            PartNumber=number,
            Body=bytes(self._buffer),
        )
        self._parts.append({"PartNumber": number, "ETag": response["ETag"]})
        self._buffer = bytearray()

    def commit(self) -> Location:
        if self._state != "open":
            raise RepositoryError(f"writer for {self.data_key!r} is {self._state}")
        client, bucket = self.repo.client, self.repo.bucket
        try:
            if self._upload_id is None:
                response = client.put_object(
                    Bucket=bucket, Key=self._key, Body=bytes(self._buffer), Metadata=self._metadata
                )
            else:
                if self._buffer:
                    self._upload_part()
                response = client.complete_multipart_upload(
                    Bucket=bucket,
                    Key=self._key,
                    UploadId=self._upload_id,
                    MultipartUpload={"Parts": self._parts},
                )
        except (ClientError, BotoCoreError) as exc:
            self.abort()
            raise self.repo._fail("commit", self.data_key, exc) from exc
        self._state = "committed"
        self._buffer = bytearray()
        etag = response.get("ETag")
        return Location(self.repo.name, self.data_key, self._size, etag=str(etag) if etag else None)

    def abort(self) -> None:
        if self._state != "open":
            return
        self._state = "aborted"
        self._buffer = bytearray()
        if self._upload_id is not None:
            # If this fails, cleanup() aborts the upload left behind.
            with contextlib.suppress(ClientError, BotoCoreError):
                self.repo.client.abort_multipart_upload(
                    Bucket=self.repo.bucket, Key=self._key, UploadId=self._upload_id
                )
