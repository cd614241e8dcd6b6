"""What the internal routes accept as a version's metadata (ARCHITECTURE.md's object
metadata), checked before anything is stored.

The replication engine writes raw metadata through `/_/crossbeat/metadata`, `replica`,
`batchReplica` and `batchUpdate`. A document the S3 handlers cannot serve (no size, a size
that is not a number, no ETag, an unparsable lastModified, a location that is not a list of
data locations) used to be stored as given, and then every GET of the object, and every
listing of its bucket, failed with a 500. Such a document is refused here with
InvalidArgument naming the field, and nothing changes. A replica is refused, likewise,
in a bucket that could not hold it as S3 would (`replica_bucket_error`).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, TypeGuard
from urllib.parse import quote

from crossbeat.metadata import Bucket
from crossbeat.metadata.store import BuiltOutcome, MetadataStore
from crossbeat.s3.errors import S3Error
from crossbeat.s3.objectmeta import check_echoable, parse_iso


def is_location_list(value: Any) -> TypeGuard[list[dict[str, Any]]]:
    """Whether `value` is a list of data locations (`{location, dataKey, ...}` objects), as a
    version's `location` and batchDelete's `locations` are."""
    return isinstance(value, list) and all(
        isinstance(loc, dict) and isinstance(loc.get("location"), str)
        and isinstance(loc.get("dataKey"), str) for loc in value
    )


# Version ids crossbeat makes are 26 characters of Crockford base32 (or "null"); replicas
# keep their source's, and other stores' ids use more of ASCII (AWS's have + . _ and -).
# Anything printable and spaceless is accepted as an id: what is not (control characters,
# spaces, non-ASCII) could not be echoed in x-amz-version-id or an XML document.
MAX_VERSION_ID = 1024


def is_version_id(value: Any) -> bool:
    """Whether `value` can name a version: 1 to 1024 printable ASCII characters, no space."""
    return (isinstance(value, str) and 0 < len(value) <= MAX_VERSION_ID
            and all("!" <= c <= "~" for c in value))  # fmt: skip


def check_version_id_arg(value: str, name: str = "versionId") -> None:
    """Raise InvalidArgument (400, as AWS) for a request's version id that names no version
    crossbeat could hold, before anything is looked up or changed: AWS's wording for an
    empty one and for a malformed one, the value shown URL-encoded (it may hold characters
    an XML document cannot)."""
    if value == "":
        raise S3Error("InvalidArgument", "Version id cannot be the empty string",
                      extra={"ArgumentName": name, "ArgumentValue": ""})  # fmt: skip
    if not is_version_id(value):
        raise S3Error("InvalidArgument", "Invalid version id specified",
                      extra={"ArgumentName": name, "ArgumentValue": quote(value[:64], safe="")})  # fmt: skip


def _bad(field: str, why: str) -> S3Error:
    return S3Error("InvalidArgument", f"version metadata: {field} {why}")


def _check_headers(meta: dict[str, Any]) -> None:
    """What GET and HEAD would echo as headers must be headers they can send."""
    echoed: list[tuple[str, Any]] = []
    for field, prefix in (("userMetadata", "x-amz-meta-"), ("systemHeaders", "")):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise _bad(field, "must be an object of strings")
        echoed += ((f"{prefix}{k}", v) for k, v in value.items())
    if meta.get("contentType") is not None:
        echoed.append(("content-type", meta["contentType"]))
    for name, value in echoed:
        if not isinstance(value, str):
            raise _bad(name, "must be a string")
        try:
            check_echoable(name, value)
        except S3Error as e:
            raise _bad(name, "cannot be sent back as a header (" + e.message + ")") from None


def check_version(meta: dict[str, Any], *, data_given: bool = False) -> None:
    """Raise InvalidArgument unless `meta` is a version the gateway can serve.
    `data_given`: the request carries the data, whose location replaces `meta`'s."""
    if "versionId" in meta and not is_version_id(meta["versionId"]):
        raise _bad("versionId", f"must be 1 to {MAX_VERSION_ID} printable ASCII characters")
    _check_headers(meta)
    marker = meta.get("isDeleteMarker", False)
    if not isinstance(marker, bool):
        raise _bad("isDeleteMarker", "must be true or false")
    modified = meta.get("lastModified")
    try:
        valid = isinstance(modified, str) and parse_iso(modified) is not None
    except ValueError:
        valid = False
    if not valid:
        raise _bad("lastModified", "must be a timestamp like 2026-01-02T03:04:05.678Z")
    size = meta.get("size", 0 if marker else None)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise _bad("size", "must be a non-negative integer")
    if marker:
        return
    if not isinstance(meta.get("etag"), str):
        raise _bad("etag", "must be a string")
    if data_given:
        return
    location = meta.get("location")
    if not is_location_list(location):
        raise _bad("location", "must be a list of {location, dataKey, ...} data locations")
    if size and not location:
        raise _bad("location", "is empty for an object with data")


def as_replica(meta: dict[str, Any]) -> None:
    """Mark a version written by a replica route (metadata create, replica, batchReplica)
    as a replica: replicationInfo status REPLICA, whatever the caller sent, so that a
    destination never treats it as its own new object to replicate (PENDING) or shows no
    status at all. The other replicationInfo fields are kept (filled when absent)."""
    given = meta.get("replicationInfo")
    info = dict(given) if isinstance(given, dict) else {}
    info["status"] = "REPLICA"
    info.setdefault("role", "")
    info.setdefault("storageClass", "")
    info.setdefault("content", [])
    info.setdefault("backends", [])
    info.setdefault("preferredRead", "")
    meta["replicationInfo"] = info


def replica_bucket_error(bucket: Bucket | None, name: str, owner: object = None) -> S3Error | None:
    """Why no replica version may be created in bucket `name` (`bucket`, None if there is
    none) for a source whose bucket's owner is `owner` (the version's `owner`), or None.
    The reasons are S3 replication's failure reasons, which fail the version (a 4xx: not
    retried) until `crossbeat replication retry`:
    - DstBucketNotFound (NoSuchBucket, 404);
    - DstBucketAccessDenied (AccessDenied, 403) when the destination bucket has another
      owner: a rule names its destination bucket freely, and the pipeline writes with
      admin credentials, so without this any user could overwrite any other user's objects
      on the destination site by naming their bucket (S3 requires the destination owner's
      grant; crossbeat replicates only between buckets of one owner). A version without an
      owner (written by an older crossbeat) is not checked;
    - DstBucketUnversioned (InvalidBucketState, 409) when versioning is not Enabled (never
      enabled, or Suspended): a replica keeps its source's versionId, and non-null
      versions in such a bucket are what no S3 bucket holds (a plain DELETE of the key
      would answer 204 and remove nothing). S3 requires versioning at the destination too.
    """
    if bucket is None:
        return S3Error("NoSuchBucket", f"DstBucketNotFound: the destination bucket {name!r} "
                       "does not exist", resource=name)
    if isinstance(owner, str) and owner and bucket.owner != owner:
        return S3Error("AccessDenied", f"DstBucketAccessDenied: the destination bucket {name!r} "
                       "belongs to another owner than the source bucket", resource=name)
    if bucket.versioning != "Enabled":
        state = bucket.versioning or "never enabled"
        return S3Error(
            "InvalidBucketState",
            f"DstBucketUnversioned: the destination bucket {name!r} has versioning {state}: "
            "replicas need it Enabled (then retry with `crossbeat replication retry`)",
            status=409, resource=name,
        )
    return None


def store_replicas(store: MetadataStore, metas: list[dict[str, Any]]) -> list[BuiltOutcome]:
    """Store replica versions (blocking: call it on a worker thread), each checked with
    `replica_bucket_error` against its bucket as the storing transaction sees it: one
    outcome per version, in order, (stored, displaced versions) or the error refusing it.

    The routes check the bucket before they store a byte, and again here: the bucket's
    versioning suspended (or the bucket deleted) between that check and the commit, say
    while a large replica's body streamed in, would otherwise get a non-null replica
    version in a bucket that may not hold one.
    """

    def build(meta: dict[str, Any]) -> Any:
        def checked(bucket: Bucket | None) -> dict[str, Any]:
            refusal = replica_bucket_error(bucket, str(meta["bucket"]), meta.get("owner"))
            if refusal is not None:
                raise refusal
            return meta

        return checked

    if not metas:
        return []
    done: Future[list[BuiltOutcome]] = Future()
    store.put_built_versions([(str(m["bucket"]), build(m)) for m in metas], done.set_result)
    return done.result()
