"""What the internal routes accept as a version's metadata (ARCHITECTURE.md's object
metadata), checked before anything is stored.

The replication engine writes raw metadata through `/_/crossbeat/metadata`, `replica`,
`batchReplica` and `batchUpdate`. A document the S3 handlers cannot serve (no size, a size
that is not a number, no ETag, an unparsable lastModified, a location that is not a list of
data locations) used to be stored as given, and then every GET of the object, and every
listing of its bucket, failed with a 500. Such a document is refused here with
InvalidArgument naming the field, and nothing changes.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from crossbeat.s3.errors import S3Error
from crossbeat.s3.objectmeta import parse_iso


def is_location_list(value: Any) -> TypeGuard[list[dict[str, Any]]]:
    """Whether `value` is a list of data locations (`{location, dataKey, ...}` objects), as a
    version's `location` and batchDelete's `locations` are."""
    return isinstance(value, list) and all(
        isinstance(loc, dict) and isinstance(loc.get("location"), str)
        and isinstance(loc.get("dataKey"), str) for loc in value
    )


def _bad(field: str, why: str) -> S3Error:
    return S3Error("InvalidArgument", f"version metadata: {field} {why}")


def check_version(meta: dict[str, Any], *, data_given: bool = False) -> None:
    """Raise InvalidArgument unless `meta` is a version the gateway can serve.
    `data_given`: the request carries the data, whose location replaces `meta`'s."""
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
