"""The seed-003 repository proxy over two real sfs repositories."""

from __future__ import annotations

import threading
from collections.abc import Generator
from pathlib import Path

import pytest

from crossbeat.repositories import NoSuchData, ProxyRepository, RepositoryError
from crossbeat.repositories.sfs import SfsRepository


def proxy_location(proxy: ProxyRepository, key: str) -> str | None:
    loc = proxy.location(key)
    return None if loc is None else loc.location


Repos = tuple[SfsRepository, SfsRepository, ProxyRepository]


@pytest.fixture
def repos(tmp_path: Path) -> Repos:
    old = SfsRepository("old", tmp_path / "old", chunk_size=64)
    new = SfsRepository("new", tmp_path / "new", chunk_size=128)
    return old, new, ProxyRepository("proxy", {"old": old, "new": new}, "new")


def test_new_objects_go_to_the_preferred_backend(repos: Repos) -> None:
    old, new, proxy = repos
    loc = proxy.put_bytes(b"fresh data")
    assert loc.location == "new"  # locations name the backend that holds the data
    assert new.read_bytes(loc.dataKey) == b"fresh data"
    assert old.size(loc.dataKey) is None
    assert proxy.read_bytes(loc.dataKey, 1, 5) == b"resh"


def test_reads_go_to_the_owner_of_an_unlocked_manifest(repos: Repos) -> None:
    old, new, proxy = repos
    key = old.put_bytes(b"x" * 500).dataKey
    assert proxy.size(key) == 500
    assert proxy.read_bytes(key) == b"x" * 500
    assert proxy_location(proxy, key) == "old"
    old.lock(key)  # a locked manifest is as good as absent
    assert proxy.size(key) is None
    with pytest.raises(NoSuchData):
        proxy.read(key)
    with pytest.raises(NoSuchData):
        proxy.read("neverwritten")


def test_migration_stages(repos: Repos) -> None:
    """Seed 003: copy locked to the preferred backend, switch locks, delete the old copy."""
    old, new, proxy = repos
    data = bytes(range(256)) * 5
    key = old.put_bytes(data).dataKey
    # Copy stage: the copy commits locked, so reads still go to the old backend.
    with new.writer(key, locked=True) as w:
        for piece in old.read(key):
            w.write(piece)
        w.commit()
    assert proxy_location(proxy, key) == "old"
    new.unlock(key)
    old.lock(key)
    assert proxy_location(proxy, key) == "new"
    assert proxy.read_bytes(key) == data
    # Delete stage: idempotent on the old backend.
    old.delete(key)
    old.delete(key)
    assert proxy.read_bytes(key) == data
    assert list(proxy.keys()) == [key]


def test_writes_naming_an_owned_key_go_to_the_owner(repos: Repos) -> None:
    old, new, proxy = repos
    key = old.put_bytes(b"old").dataKey
    with pytest.raises(RepositoryError, match="already exists in repository 'old'"):
        proxy.writer(key)
    with proxy.writer("givenkey123") as w:
        w.write(b"abc")
        assert w.commit().location == "new"


def test_deletes_reach_every_backend(repos: Repos) -> None:
    old, new, proxy = repos
    key = old.put_bytes(b"a").dataKey
    with new.writer(key, locked=True) as w:
        w.write(b"a")
        w.commit()
    proxy.delete(key)
    assert old.stat(key) is None and new.stat(key) is None
    proxy.delete(key)  # idempotent


def test_keys_and_cleanup_cover_all_backends(repos: Repos) -> None:
    old, new, proxy = repos
    a = old.put_bytes(b"a").dataKey
    b = new.put_bytes(b"b").dataKey
    assert sorted(proxy.keys()) == sorted([a, b])
    assert proxy.cleanup(lambda k: k == a, older_than_s=0) == [b]
    assert list(proxy.keys()) == [a]


def test_bad_proxy_configuration(tmp_path: Path) -> None:
    repo = SfsRepository("one", tmp_path)
    with pytest.raises(RepositoryError):
        ProxyRepository("p", {"one": repo}, "two")
    with pytest.raises(RepositoryError):
        ProxyRepository("p", {}, "one")


def test_reader_latch_counts_streams_in_progress(repos: Repos) -> None:
    old, new, proxy = repos
    key = old.put_bytes(b"z" * 1000).dataKey  # 16 chunks of 64 bytes
    stream = proxy.read(key)
    assert proxy.active_reads(key) == 0  # nothing streams until the first chunk is asked for
    assert next(stream) == b"z" * 64
    second = proxy.read(key, 10, 20)
    assert b"".join(second) == b"z" * 10
    assert proxy.active_reads(key) == 1
    assert proxy.wait_for_readers(key, timeout=0.05) is False

    done = threading.Event()

    def wait() -> None:
        if proxy.wait_for_readers(key, timeout=30):
            done.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert b"".join(stream) == b"z" * (1000 - 64)
    waiter.join(timeout=30)
    assert done.is_set() and proxy.active_reads(key) == 0
    abandoned = proxy.read(key)
    assert isinstance(abandoned, Generator)
    next(abandoned)
    abandoned.close()  # a client that hangs up mid-stream
    assert proxy.active_reads(key) == 0
