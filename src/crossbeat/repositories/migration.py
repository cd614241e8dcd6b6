"""Seed 003's migration of one object between repositories (copy, wait, delete stages).

`migrate_object` moves one objectId from `source` to `target` under live traffic through a
`ProxyRepository` that bundles both: the copy commits locked in the target, then the locks
swap (from that moment the proxy sends new reads to the target), streams already reading
the old copy are waited for, and the old copy is deleted. Every step is idempotent, so an
interrupted migration is simply run again. Deciding *which* objects to migrate, reporting
progress and allowing only one migration per cluster are the caller's business.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from crossbeat.repositories.base import Repository
from crossbeat.repositories.errors import NoSuchData, RepositoryError


class Outcome(enum.Enum):
    COPIED = "copied"  # data copied, old copy deleted
    ALREADY_MIGRATED = "already-migrated"  # the target held a complete copy already
    ABSENT = "absent"  # neither repository holds the object


def migrate_object(
    source: Repository,
    target: Repository,
    data_key: str,
    *,
    wait_for_readers: Callable[[str], bool] = lambda _key: True,
) -> Outcome:
    """Move `data_key` from `source` to `target`; return what happened.

    `wait_for_readers(data_key)` implements the wait stage (for example
    `lambda key: proxy.wait_for_readers(key, timeout=600)`); if it returns False the old
    copy is kept (locked) and `RepositoryError` is raised, so a later run can finish.
    """
    src = source.stat(data_key)
    dst = target.stat(data_key)
    if src is None:
        if dst is None:
            return Outcome.ABSENT
        if dst.locked:  # crashed between copy and unlock, and the source is gone: keep it
            target.unlock(data_key)
        return Outcome.ALREADY_MIGRATED
    # Copy stage. A complete copy (same size) counts as copied; anything else is removed.
    outcome = Outcome.COPIED
    if dst is not None and dst.size == src.size:
        outcome = Outcome.ALREADY_MIGRATED
    else:
        if dst is not None:
            target.delete(data_key)
        if src.locked:
            raise RepositoryError(
                f"{data_key!r} is locked in {source.name!r} but has no complete copy in "
                f"{target.name!r}; refusing to read a locked object"
            )
        _copy(source, target, data_key, src.size)
        # A DELETE while the copy ran removed the source (and, through the proxy, whatever
        # of the copy existed then): the copy committed since would stay, unreferenced.
        if source.stat(data_key) is None:
            target.delete(data_key)
            return Outcome.ABSENT
    target.unlock(data_key)
    if not src.locked:
        try:
            source.lock(data_key)
        except NoSuchData:  # deleted between the check and the lock: the copy goes too
            target.delete(data_key)
            return Outcome.ABSENT
    # Wait stage, then delete stage (idempotent on the old repository).
    if not wait_for_readers(data_key):
        raise RepositoryError(f"readers of {data_key!r} did not finish; old copy kept locked")
    source.delete(data_key)
    return outcome


def _copy(source: Repository, target: Repository, data_key: str, size: int) -> None:
    with target.writer(data_key, locked=True) as writer:
        try:
            for piece in source.read(data_key):
                writer.write(piece)
        except NoSuchData as exc:
            raise RepositoryError(f"{data_key!r} vanished from {source.name!r} mid-copy") from exc
        if writer.bytes_written != size:
            raise RepositoryError(
                f"copy of {data_key!r} has {writer.bytes_written} bytes, expected {size}"
            )
        writer.commit()
