"""`Location`: where one piece of an object's data lives (object metadata's `location[]`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossbeat.repositories.errors import RepositoryError


@dataclass(frozen=True)
class Location:
    """`{location, dataKey, size}` as ARCHITECTURE.md fixes it.

    `location` names a configured repository, `dataKey` is the objectId inside it.
    `etag` (JSON `dataEtag`, absent when None) is what the backend of an s3 repository
    answered to the write: reads ask for that very object (If-Match), so an object replaced
    behind our back is refused instead of served. Locations written before it was recorded,
    and sfs ones (their chunks carry digests), have none.
    """

    location: str
    dataKey: str  # noqa: N815 - the JSON field name of the metadata contract
    size: int
    etag: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"location": self.location, "dataKey": self.dataKey, "size": self.size}
        if self.etag is not None:
            out["dataEtag"] = self.etag
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Location:
        """Parse a metadata `location[]` entry; a malformed one is a `RepositoryError`."""
        try:
            location, data_key, size = d["location"], d["dataKey"], d["size"]
        except (KeyError, TypeError) as exc:
            raise RepositoryError(f"malformed location {d!r}: missing {exc}") from exc
        if not isinstance(location, str) or not isinstance(data_key, str):
            raise RepositoryError(f"malformed location {d!r}: location and dataKey are strings")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise RepositoryError(f"malformed location {d!r}: size is a non-negative integer")
        etag = d.get("dataEtag")
        if etag is not None and not isinstance(etag, str):
            raise RepositoryError(f"malformed location {d!r}: dataEtag is a string")
        return cls(location=location, dataKey=data_key, size=size, etag=etag)
