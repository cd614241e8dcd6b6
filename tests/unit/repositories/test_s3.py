"""The s3 repository against a real moto S3 server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossbeat.repositories import Location, NoSuchData, RepositoryError
from crossbeat.repositories.s3 import S3Repository
from crossbeat.repositories.settings import RepositorySettings

MiB = 1024 * 1024


@pytest.fixture
def s3(s3_settings: RepositorySettings) -> Iterator[S3Repository]:
    repo = S3Repository.from_settings("cloud", s3_settings)
    yield repo
    repo.close()


def test_small_round_trip_and_ranges(s3: S3Repository) -> None:
    data = os.urandom(10_000)
    loc = s3.put_bytes(data)
    assert loc.location == "cloud" and loc.size == 10_000
    assert s3.size(loc.dataKey) == 10_000
    assert s3.read_bytes(loc.dataKey) == data
    for start, end in [(0, 1), (5, 9999), (9999, None), (10_000, None), (7, 7), (100, 50_000)]:
        assert s3.read_bytes(loc.dataKey, start, end) == data[start:end], (start, end)
    with pytest.raises(RepositoryError):
        s3.read(loc.dataKey, 10_001)
    stored = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
    assert [o["Key"] for o in stored] == [f"data/{loc.dataKey}"]
    assert list(s3.keys()) == [loc.dataKey]


def test_multipart_above_part_size(s3: S3Repository) -> None:
    piece = os.urandom(MiB)
    with s3.writer() as w:
        for _ in range(12):  # 12 MiB: two 5 MiB parts and a 2 MiB tail
            w.write(piece)
        loc = w.commit()
    assert loc.size == 12 * MiB
    assert (
        s3.read_bytes(loc.dataKey, 5 * MiB - 3, 5 * MiB + 3)
        == (piece * 6)[5 * MiB - 3 : 5 * MiB + 3]
    )
    assert s3.read_bytes(loc.dataKey) == piece * 12
    head = s3.client.head_object(Bucket=s3.bucket, Key=f"data/{loc.dataKey}")
    assert "-" in head["ETag"]  # a multipart ETag


def test_abort_leaves_nothing(s3: S3Repository) -> None:
    with pytest.raises(ZeroDivisionError), s3.writer() as w:
        w.write(os.urandom(6 * MiB))  # one part uploaded
        1 / 0  # noqa: B018
    assert s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", []) == []
    assert list(s3.keys()) == []
    assert s3.size(w.data_key) is None


def test_absent_delete_and_lock(s3: S3Repository) -> None:
    with pytest.raises(NoSuchData):
        s3.read("nosuchobject")
    assert s3.size("nosuchobject") is None
    s3.delete("nosuchobject")
    key = s3.put_bytes(b"payload").dataKey
    s3.lock(key)
    assert s3.size(key) is None
    with pytest.raises(NoSuchData, match="locked"):
        s3.read(key)
    stat = s3.stat(key)
    assert stat is not None and stat.locked and stat.size == 7
    s3.unlock(key)
    assert s3.read_bytes(key) == b"payload"
    s3.delete(key)
    s3.delete(key)
    assert s3.size(key) is None


def test_cleanup(s3: S3Repository) -> None:
    kept = s3.put_bytes(b"kept").dataKey
    orphan = s3.put_bytes(b"orphan").dataKey
    w = s3.writer()
    w.write(os.urandom(5 * MiB))  # an abandoned multipart upload
    assert s3.cleanup(lambda k: k == kept, older_than_s=3600) == []
    removed = s3.cleanup(lambda k: k == kept, older_than_s=0)
    assert sorted(removed) == sorted([orphan, w.data_key])
    assert list(s3.keys()) == [kept]
    assert s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", []) == []


def test_proxy_migrates_from_s3_to_sfs(s3: S3Repository, tmp_path: Path) -> None:
    from crossbeat.repositories import ProxyRepository
    from crossbeat.repositories.sfs import SfsRepository

    local = SfsRepository("local", tmp_path, chunk_size=4096)
    proxy = ProxyRepository("migrate", {"cloud": s3, "local": local}, "local")
    data = os.urandom(10_000)
    key = s3.put_bytes(data).dataKey
    assert proxy.location(key) == Location("cloud", key, 10_000)
    with local.writer(key, locked=True) as w:  # copy stage
        for piece in proxy.read(key):
            w.write(piece)
        w.commit()
    local.unlock(key)
    s3.lock(key)
    assert proxy.location(key) == Location("local", key, 10_000)
    assert proxy.wait_for_readers(key, timeout=5)  # wait stage
    s3.delete(key)  # delete stage
    assert proxy.read_bytes(key, 100, 200) == data[100:200]
    proxy.delete(key)
    assert proxy.stat(key) is None
