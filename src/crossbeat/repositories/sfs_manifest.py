"""The sfs manifest (`manifest.json`): an object's size, chunking, digests and lock flag.

```json
{"version": 1, "objectId": "…", "size": 5, "chunkSize": 4194304, "chunkCount": 1,
 "digestAlgorithm": "siphash-2-4", "digests": ["1d335a487e288e0d"],
 "created": 1732243200.123, "locked": false}
```

`digests[i]` is the SipHash-2-4 (hex, the repository's 16-byte key) of chunk `i`. Every
chunk is `chunkSize` bytes long except the last, which holds the remainder.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import orjson

DIGEST_ALGORITHM = "siphash-2-4"
MANIFEST_VERSION = 1


MAX_CHUNK_SIZE = 1024 * 1024 * 1024  # the largest chunk_size a repository may be configured with


class ManifestInvalid(ValueError):
    """The manifest bytes are not a consistent manifest (the caller names the object)."""


@dataclass(frozen=True)
class Manifest:
    object_id: str
    size: int
    chunk_size: int
    digests: tuple[str, ...]
    created: float
    locked: bool = False

    @property
    def chunk_count(self) -> int:
        return len(self.digests)

    def chunk_length(self, index: int) -> int:
        """The exact length chunk `index` must have."""
        return min(self.chunk_size, self.size - index * self.chunk_size)

    def with_locked(self, locked: bool) -> Manifest:
        return replace(self, locked=locked)

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "version": MANIFEST_VERSION,
                "objectId": self.object_id,
                "size": self.size,
                "chunkSize": self.chunk_size,
                "chunkCount": len(self.digests),
                "digestAlgorithm": DIGEST_ALGORITHM,
                "digests": list(self.digests),
                "created": self.created,
                "locked": self.locked,
            }
        )

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        """Parse and check consistency; raise `ManifestInvalid` saying what is wrong."""
        try:
            doc: Any = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ManifestInvalid(f"manifest is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise ManifestInvalid("manifest is not a JSON object")
        try:
            manifest = cls(
                object_id=doc["objectId"],
                size=doc["size"],
                chunk_size=doc["chunkSize"],
                digests=tuple(doc["digests"]),
                created=float(doc["created"]),
                locked=doc.get("locked", False),
            )
            count = doc["chunkCount"]
            algorithm = doc["digestAlgorithm"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestInvalid(f"manifest field missing or malformed: {exc}") from exc
        manifest._check(count, algorithm)
        return manifest

    def _check(self, count: object, algorithm: object) -> None:
        if algorithm != DIGEST_ALGORITHM:
            raise ManifestInvalid(f"unknown digest algorithm {algorithm!r}")
        ints = (self.size, self.chunk_size, count)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in ints):
            raise ManifestInvalid("size, chunkSize and chunkCount must be integers")
        if self.size < 0 or not 0 < self.chunk_size <= MAX_CHUNK_SIZE:
            # a chunk is read whole: an absurd size would be a MemoryError, not an answer
            raise ManifestInvalid(f"size must be >= 0 and chunkSize in 1..{MAX_CHUNK_SIZE}")
        expected = -(-self.size // self.chunk_size)
        if count != len(self.digests) or count != expected:
            raise ManifestInvalid(
                f"chunkCount {count} and {len(self.digests)} digests do not fit size "
                f"{self.size} with chunkSize {self.chunk_size} ({expected} chunks)"
            )
        if not all(isinstance(d, str) and len(d) == 16 for d in self.digests):
            raise ManifestInvalid("digests must be 16 hex digits each")
        if not isinstance(self.locked, bool) or not isinstance(self.object_id, str):
            raise ManifestInvalid("locked must be a boolean and objectId a string")
