"""Data repositories: where object bytes live (seed 003).

- `sfs`: the simple filesystem repository (chunk files + JSON manifest with SipHash digests)
- `s3`: any S3 endpoint (imported lazily: boto3 is slow to import)
- `proxy`: several repositories behind one name, for live migration (`migration`)

Object metadata points at data with `Location(location=repository name, dataKey, size)`.
`open_repositories(settings, data_dir)` opens the configured ones by name (a proxy's backend
names resolve to the proxy); `cleanup_repositories` removes leftovers once per repository.

Writing: `with repo.writer() as w: w.write(...); loc = w.commit()` — durable on return,
invisible before. Reading: `repo.read(key, start, end)` raises `NoSuchData` at once if the
object is absent or locked, and `CorruptData` before yielding a chunk that fails its digest.
"""

from crossbeat.repositories.base import ObjectStat, ObjectWriter, Repository
from crossbeat.repositories.errors import CorruptData, NoSuchData, RepositoryError
from crossbeat.repositories.location import Location
from crossbeat.repositories.object_ids import new_object_id
from crossbeat.repositories.proxy import ProxyRepository
from crossbeat.repositories.registry import (
    DEFAULT_REPOSITORY,
    cleanup_repositories,
    names_by_repository,
    open_repositories,
)
from crossbeat.repositories.settings import RepositorySettings
from crossbeat.repositories.sfs import SfsRepository

__all__ = [
    "DEFAULT_REPOSITORY",
    "CorruptData",
    "Location",
    "NoSuchData",
    "ObjectStat",
    "ObjectWriter",
    "ProxyRepository",
    "Repository",
    "RepositoryError",
    "RepositorySettings",
    "SfsRepository",
    "cleanup_repositories",
    "names_by_repository",
    "new_object_id",
    "open_repositories",
]
