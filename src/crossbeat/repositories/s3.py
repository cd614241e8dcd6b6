"""A repository over any S3 endpoint (boto3).

Each object is one S3 object `{prefix}{objectId}`: written with one PUT up to the part size,
as a multipart upload above it (so memory stays at one part), read with ranged GETs and
streamed. Integrity in transit and at rest is the endpoint's business (boto3 checksums, the
endpoint's own); a body shorter than announced is an error, never silently short data.

Seed 003's lock flag is user metadata `x-amz-meta-crossbeat-locked: true`, changed with a
server-side copy onto the object itself (objects up to 5 GiB). GET and HEAD responses carry
it, so honouring it costs reads nothing extra. Credentials left unset fall back to boto3's
default credential chain.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from crossbeat.repositories.base import (
    ObjectStat,
    ObjectWriter,
    Repository,
    orphans_plausible,
    refuse_orphans,
)
from crossbeat.repositories.errors import NoSuchData, RepositoryError
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

LOCK_META = "crossbeat-locked"
READ_CHUNK = 1024 * 1024
_ABSENT = {"NoSuchKey", "404", "NotFound", "NoSuchUpload"}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


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
    ) -> None:
        if part_size < 5 * 1024 * 1024:
            raise RepositoryError("S3 parts must be at least 5 MiB")
        self.name = name
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.part_size = part_size

    @classmethod
    def from_settings(cls, name: str, settings: RepositorySettings) -> S3Repository:
        assert settings.bucket is not None  # checked by the settings model
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
                retries={"mode": "standard", "max_attempts": 4},
                max_pool_connections=32,
            ),
        )
        return cls(
            name, client, settings.bucket, prefix=settings.prefix, part_size=settings.part_size
        )

    def object_key(self, data_key: str) -> str:
        return self.prefix + check_object_id(data_key)

    def _fail(self, what: str, data_key: str, exc: Exception) -> RepositoryError:
        return RepositoryError(f"s3 repository {self.name!r}: {what} {data_key!r}: {exc}")

    # -- the Repository contract ---------------------------------------------------------

    def writer(self, data_key: str | None = None, *, locked: bool = False) -> S3Writer:
        if data_key is None:
            data_key = new_object_id()
        elif self.stat(data_key) is not None:
            raise RepositoryError(f"object {data_key!r} already exists in repository {self.name!r}")
        return S3Writer(self, data_key, locked)

    def read(self, data_key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
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
        return self._stream(response, data_key)

    def _stream(self, response: dict[str, Any], data_key: str) -> Iterator[bytes]:
        body = response["Body"]
        expected = response["ContentLength"]
        received = 0
        try:
            for piece in body.iter_chunks(READ_CHUNK):
                received += len(piece)
                yield piece
        except BotoCoreError as exc:  # includes a body shorter than Content-Length
            raise self._fail("read", data_key, exc) from exc
        finally:
            body.close()
        if received != expected:
            raise RepositoryError(f"read {data_key!r}: got {received} bytes, expected {expected}")

    def _head(self, data_key: str) -> dict[str, Any] | None:
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
        for data_key, _ in self._list():
            yield data_key

    def cleanup(self, referenced: Callable[[str], bool], older_than_s: float = 3600) -> list[str]:
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
                client.put_object(
                    Bucket=bucket, Key=self._key, Body=bytes(self._buffer), Metadata=self._metadata
                )
            else:
                if self._buffer:
                    self._upload_part()
                client.complete_multipart_upload(
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
        return Location(self.repo.name, self.data_key, self._size)

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
