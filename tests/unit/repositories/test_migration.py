"""Seed 003 migration of single objects between two sfs repositories behind a proxy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crossbeat.repositories import ProxyRepository, RepositoryError
from crossbeat.repositories.migration import Outcome, migrate_object
from crossbeat.repositories.sfs import SfsRepository
from tests.support.procs import wait_until


@pytest.fixture
def pair(tmp_path: Path) -> tuple[SfsRepository, SfsRepository, ProxyRepository]:
    old = SfsRepository("old", tmp_path / "old", chunk_size=100)
    new = SfsRepository("new", tmp_path / "new", chunk_size=300)
    return old, new, ProxyRepository("p", {"old": old, "new": new}, "new")


def test_migrates_and_is_idempotent(
    pair: tuple[SfsRepository, SfsRepository, ProxyRepository],
) -> None:
    old, new, proxy = pair
    data = bytes(range(256)) * 7
    key = old.put_bytes(data).dataKey
    wait = lambda k: proxy.wait_for_readers(k, timeout=5)  # noqa: E731
    assert migrate_object(old, new, key, wait_for_readers=wait) is Outcome.COPIED
    assert old.stat(key) is None
    assert new.read_bytes(key) == data and proxy.read_bytes(key) == data
    assert migrate_object(old, new, key) is Outcome.ALREADY_MIGRATED
    assert migrate_object(old, new, "neverexisted") is Outcome.ABSENT


def test_resumes_after_an_interrupted_copy(
    pair: tuple[SfsRepository, SfsRepository, ProxyRepository],
) -> None:
    old, new, proxy = pair
    data = b"q" * 1000
    key = old.put_bytes(data).dataKey
    with new.writer(key, locked=True) as w:  # a copy that was cut short and committed wrong
        w.write(b"q" * 10)
        w.commit()
    assert proxy.read_bytes(key) == data  # still served from the old repository
    assert migrate_object(old, new, key) is Outcome.COPIED
    assert proxy.read_bytes(key) == data and old.stat(key) is None


def test_resumes_after_the_lock_switch(
    pair: tuple[SfsRepository, SfsRepository, ProxyRepository],
) -> None:
    old, new, proxy = pair
    key = old.put_bytes(b"switched").dataKey
    with new.writer(key, locked=True) as w:
        w.write(b"switched")
        w.commit()
    new.unlock(key)
    old.lock(key)  # crashed before the delete stage
    assert migrate_object(old, new, key) is Outcome.ALREADY_MIGRATED
    assert old.stat(key) is None and proxy.read_bytes(key) == b"switched"


def test_keeps_the_old_copy_while_readers_remain(
    pair: tuple[SfsRepository, SfsRepository, ProxyRepository],
) -> None:
    old, new, proxy = pair
    key = old.put_bytes(b"r" * 500).dataKey
    stream = proxy.read(key)
    next(stream)  # a reader of the old copy is mid-stream
    with pytest.raises(RepositoryError, match="readers"):
        migrate_object(old, new, key, wait_for_readers=lambda k: proxy.wait_for_readers(k, 0.05))
    stat = old.stat(key)
    assert stat is not None and stat.locked  # kept, locked
    assert b"".join(stream) == b"r" * 400  # the old reader finishes undisturbed
    assert proxy.read_bytes(key) == b"r" * 500  # new reads go to the copy
    assert migrate_object(old, new, key) is Outcome.ALREADY_MIGRATED
    assert old.stat(key) is None


def test_a_small_copy_never_shows_its_reader_a_torn_manifest(
    pair: tuple[SfsRepository, SfsRepository, ProxyRepository],
) -> None:
    """The proxy asks the target first. A small object's copy wrote its manifest in place,
    like a new object's (which nothing refers to until it is committed): a read in between
    found it empty, which is CorruptData, not absent, and got a 500 for a readable object."""
    import threading

    old, new, proxy = pair
    objects = {old.put_bytes(bytes([i % 251]) * (40 + i % 50)).dataKey: bytes([i % 251]) * (40 + i % 50)
               for i in range(200)}  # under the target's one chunk: its small-object path
    migrating: list[str] = []  # the key being migrated now, which the reader reads over and over
    done = threading.Event()
    wrong: list[str] = []

    def read_current() -> None:
        while not done.is_set():
            if not migrating:
                continue
            key = migrating[-1]
            try:
                if proxy.read_bytes(key) != objects[key]:
                    wrong.append(f"{key}: other bytes")
            except RepositoryError as exc:  # CorruptData; NoSuchData would be a swap race
                wrong.append(f"{key}: {exc}")

    reader = threading.Thread(target=read_current)
    reader.start()
    try:
        for key in objects:
            migrating.append(key)
            migrate_object(old, new, key, wait_for_readers=lambda k: proxy.wait_for_readers(k, timeout=5))
    finally:
        done.set()
        reader.join()
    assert not wrong, wrong[:5]
    assert all(new.read_bytes(key) == data for key, data in objects.items())


def test_a_delete_during_the_copy_leaves_no_copy_behind(tmp_path: Path) -> None:
    """The source deleted while its copy streams (the copy reads pinned files, so it goes on
    to commit): the copy stayed in the target, unlocked, referenced by nothing, and the
    migration failed on the source's lock."""
    import threading

    old = SfsRepository("old", tmp_path / "old", chunk_size=64 * 1024)
    new = SfsRepository("new", tmp_path / "new", chunk_size=64 * 1024)
    key = old.put_bytes(os.urandom(8 * 1024 * 1024)).dataKey  # 128 chunks, fsynced one by one
    result: list[object] = []

    def migrate() -> None:
        try:
            result.append(migrate_object(old, new, key))
        except RepositoryError as exc:
            result.append(exc)

    mover = threading.Thread(target=migrate)
    mover.start()
    wait_until(lambda: os.path.isdir(new.object_dir(key)) or result, timeout=30,
               interval=0.001, what="the copy under way")
    assert not result, "the copy ended before the test could delete its source"
    old.delete(key)
    mover.join(timeout=60)
    assert result == [Outcome.ABSENT]
    assert old.stat(key) is None and new.stat(key) is None
    assert not os.path.exists(new.object_dir(key))
