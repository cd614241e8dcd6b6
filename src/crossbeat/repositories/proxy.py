"""The seed-003 repository proxy: several repositories behind one, for live migration.

- Reads go to the backend that owns an unlocked manifest: for a read of a location, the
  backend it names first (where the data was written; no wasted round trip to the preferred
  one), then the others; without a location, the preferred backend first. A backend that
  fails (down, damaged copy) is passed over like one that lacks the object, so a healthy
  backend holding a copy still serves it; a locked manifest counts as absent, so none found
  means `NoSuchData`, or the first backend's error if one failed.
- Writes of a new object go to the preferred backend; a write naming an existing objectId
  is delegated to the backend that owns it.
- Deletes go to every backend, whether or not it holds the object or has it locked.

Locations written through the proxy name the backend that holds the data, not the proxy:
`open_repositories` makes every backend name resolve to the proxy while it is configured
(the seed: the proxy "takes precedence over all other repositories"). A migration
(`migration.migrate_object`) moves data to another backend without changing the locations
that name it, so the proxy must stay configured while any migrated object's location names
its old backend: without it those objects read as errors (the start-up cleanup keeps their
data, and putting the proxy back serves them again).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace

from crossbeat.repositories.base import ObjectStat, ObjectWriter, Repository
from crossbeat.repositories.errors import NoSuchData, RepositoryError
from crossbeat.repositories.io import BoundedExecutor
from crossbeat.repositories.location import Location


class ProxyRepository(Repository):
    """Delegates to `backends` (name → repository) as seed 003 prescribes."""

    def __init__(self, name: str, backends: dict[str, Repository], preferred_backend: str) -> None:
        if not backends:
            raise RepositoryError(f"proxy {name!r} needs at least one backend")
        if preferred_backend not in backends:
            raise RepositoryError(
                f"proxy {name!r}: preferred backend {preferred_backend!r} is not a backend"
            )
        self.name = name
        self.backends = dict(backends)
        self.preferred_backend = preferred_backend
        self.preferred = backends[preferred_backend]
        # The preferred backend is asked first: after migration most objects live there.
        self._order = [self.preferred] + [b for n, b in backends.items() if n != preferred_backend]
        # Seed 003's countdown latch: streams in progress per objectId, so that migration
        # deletes the old copy only once nobody reads it any more.
        self._readers: dict[str, int] = {}
        self._readers_changed = threading.Condition()
        # A read may wait on any backend: on a remote one's threads if there is one (those
        # are bounded and apart from the gateway's), so that a hung member stalls only this.
        remote = [b.io_executor for b in self._order if b.io_executor is not None]
        self.io_executor: BoundedExecutor | None = remote[0] if remote else None

    @property
    def pins_reads(self) -> bool:  # type: ignore[override]
        """A read is the backend's: pinned if every backend pins its reads."""
        return all(backend.pins_reads for backend in self.backends.values())

    def owner(self, data_key: str) -> Repository | None:
        """The backend holding an unlocked manifest for `data_key`, if any."""
        found = self._unlocked(data_key)
        return found[0] if found is not None else None

    def _unlocked(self, data_key: str) -> tuple[Repository, int] | None:
        """(the backend holding an unlocked manifest for `data_key`, its size), if any: in
        two passes, as `read` looks (a migration's swap between two backends' answers). A
        backend that fails is passed over; if none has the object and one failed, its
        error is raised (absence cannot be told)."""
        failed: RepositoryError | None = None
        for _ in range(2):
            for backend in self._order:
                try:
                    size = backend.size(data_key)
                except RepositoryError as exc:
                    failed = failed or exc
                    continue
                if size is not None:
                    return backend, size
        if failed is not None:
            raise failed
        return None

    def writer(self, data_key: str | None = None, *, locked: bool = False) -> ObjectWriter:
        target = self.preferred
        if data_key is not None:
            target = self.owner(data_key) or self.preferred
        return target.writer(data_key, locked=locked)

    def small_writer(self, data: bytes) -> ObjectWriter | None:
        return self.preferred.small_writer(data)

    def read(self, data_key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        # Two passes: a migration unlocks the copy, then locks the original, so one of them
        # is always readable; but a pass that asked the target while its copy was still
        # locked and the source once it was locked found neither. The second pass finds
        # the copy (it stays unlocked); finding nothing twice means the object is gone.
        return self._first(data_key, [(b, lambda b: b.read(data_key, start, end)) for b in self._order])

    def read_location(self, location: Location, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The backend the location names first (it holds the data unless a migration moved
        it), with the location's checks; then the others, without its ETag, which is that
        backend's (a migrated copy has its own)."""
        named = self.backends.get(location.location)
        plain = replace(location, etag=None)
        tries = [(named, lambda b: b.read_location(location, start, end))] if named is not None else []
        tries += [(b, lambda b: b.read_location(plain, start, end)) for b in self._order if b is not named]
        return self._first(location.dataKey, tries)

    def _first(
        self, data_key: str, tries: list[tuple[Repository, Callable[[Repository], Iterator[bytes]]]]
    ) -> Iterator[bytes]:
        """The first read in `tries` that begins, counted in the reader latch. Any backend
        error passes to the next backend: a member that is down or holds a damaged copy
        must not hide a good copy in another. Nothing found: the first error, if a backend
        failed (it may hold the object), else `NoSuchData`."""
        failed: RepositoryError | None = None
        for _ in range(2):
            for backend, begin in tries:
                try:
                    stream = begin(backend)
                except NoSuchData:
                    continue
                except RepositoryError as exc:
                    failed = failed or exc
                    continue
                return self._counted(data_key, stream)
        if failed is not None:
            raise failed
        raise NoSuchData(self.name, data_key)

    def _counted(self, data_key: str, stream: Iterator[bytes]) -> Iterator[bytes]:
        """`stream`, counted in the reader latch from first to last (or abandoned) chunk."""
        with self._readers_changed:
            self._readers[data_key] = self._readers.get(data_key, 0) + 1
        try:
            yield from stream
        finally:
            with self._readers_changed:
                left = self._readers[data_key] - 1
                if left:
                    self._readers[data_key] = left
                else:
                    del self._readers[data_key]
                    self._readers_changed.notify_all()

    def active_reads(self, data_key: str) -> int:
        """How many reads of `data_key` through this proxy are streaming now (seed 003 latch)."""
        with self._readers_changed:
            return self._readers.get(data_key, 0)

    def wait_for_readers(self, data_key: str, timeout: float) -> bool:
        """Block until no read of `data_key` is streaming (the migration's wait stage).

        Returns False if readers remain after `timeout` seconds. Reads begun after the
        migration switched locks go to the new copy, so only older ones are waited for.
        """
        with self._readers_changed:
            return self._readers_changed.wait_for(
                lambda: data_key not in self._readers, timeout=timeout
            )

    def size(self, data_key: str) -> int | None:
        found = self._unlocked(data_key)
        return found[1] if found is not None else None

    def stat(self, data_key: str) -> ObjectStat | None:
        """The unlocked copy's stat if there is one, else a locked copy's, else None."""
        found: ObjectStat | None = None
        for backend in self._order:
            stat = backend.stat(data_key)
            if stat is not None and not stat.locked:
                return stat
            found = found or stat
        return found

    def delete(self, data_key: str) -> None:
        errors: list[str] = []
        for name, backend in self.backends.items():
            try:
                backend.delete(data_key)
            except RepositoryError as exc:
                errors.append(f"{name}: {exc}")
        if errors:
            raise RepositoryError(f"proxy {self.name!r} delete {data_key!r}: {'; '.join(errors)}")

    def keys(self) -> Iterator[str]:
        seen: set[str] = set()
        for backend in self._order:
            for key in backend.keys():  # noqa: SIM118 - a Repository, not a dict
                if key not in seen:
                    seen.add(key)
                    yield key

    def cleanup(self, referenced: Callable[[str], bool], older_than_s: float = 3600) -> list[str]:
        removed: list[str] = []
        for backend in self._order:
            removed.extend(backend.cleanup(referenced, older_than_s))
        return removed

    def lock(self, data_key: str) -> None:
        """Lock the unlocked copy (the one reads would use)."""
        backend = self.owner(data_key)
        if backend is None:
            raise NoSuchData(self.name, data_key)
        backend.lock(data_key)

    def unlock(self, data_key: str) -> None:
        """Unlock the copy in the preferred backend, else in the first backend that has one."""
        for backend in self._order:
            stat = backend.stat(data_key)
            if stat is not None:
                if stat.locked:
                    backend.unlock(data_key)
                return
        raise NoSuchData(self.name, data_key)

    def location(self, data_key: str) -> Location | None:
        """Where reads of `data_key` currently go, naming the backend."""
        found = self._unlocked(data_key)
        return Location(found[0].name, data_key, found[1]) if found is not None else None

    def close(self) -> None:
        for backend in self.backends.values():
            backend.close()
