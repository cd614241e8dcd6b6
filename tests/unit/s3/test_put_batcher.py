"""Small PUTs' group commit: staged objects share syncs and metadata transactions, and a
refused object leaves neither metadata nor data behind."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossbeat.metadata import Bucket
from crossbeat.metadata.errors import InvalidMetadata
from crossbeat.repositories import syncgroup
from crossbeat.repositories.sfs import SfsRepository
from crossbeat.s3.body import Checksums
from crossbeat.s3.datapath import Written
from crossbeat.s3.errors import S3Error
from crossbeat.s3.gateway import Gateway
from crossbeat.s3.settings import GatewaySettings

pytestmark = pytest.mark.skipif(not syncgroup.available(), reason="syncfs(2) is Linux-only")


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    gateway = Gateway.open(GatewaySettings(data_dir=tmp_path / "data", workers=1), {})
    gateway.store.create_bucket(Bucket("b", "owner", "default", "2026-01-01T00:00:00.000Z"))
    try:
        yield gateway
    finally:
        gateway.close()


def build_for(key: str) -> Any:
    def build(written: Written, bucket: Bucket | None) -> dict[str, Any]:
        if bucket is None:
            raise S3Error("NoSuchBucket")
        return {
            "bucket": bucket.name, "key": key, "versionId": "null", "isLatest": True,
            "isDeleteMarker": False, "size": written.size, "etag": written.md5_hex,
            "location": [written.location.to_json()],
        }  # fmt: skip

    return build


def checksums() -> Checksums:
    return Checksums(md5_hex="0" * 32, algorithm=None, value_b64=None)


async def put_many(gw: Gateway, bucket: str, n: int) -> list[Any]:
    repo = gw.repository("default")
    staged = [repo.stage_bytes(os.urandom(100 + i)) for i in range(n)]
    assert all(s is not None for s in staged)
    return await asyncio.gather(
        *(gw.put_batcher.put(s, checksums(), bucket, build_for(f"k{i}")) for i, s in enumerate(staged) if s),
        return_exceptions=True,
    )


def test_a_burst_of_puts_shares_syncs_and_transactions(gw: Gateway) -> None:
    results = asyncio.run(put_many(gw, "b", 50))
    repo = gw.repository("default")
    assert isinstance(repo, SfsRepository) and repo._sync_group is not None
    for i, (written, meta) in enumerate(results):
        stored = gw.store.get_version("b", f"k{i}", None)
        assert stored is not None and stored["location"] == meta["location"]
        assert len(repo.read_bytes(written.location.dataKey)) == 100 + i
    # staged before the first round began, all fifty ride on very few syncs and commits
    assert repo._sync_group.rounds < 10
    assert gw.put_batcher.batches < 10


def test_a_refused_version_leaves_no_data(gw: Gateway) -> None:
    results = asyncio.run(put_many(gw, "missing", 3))
    assert all(isinstance(r, S3Error) and r.code == "NoSuchBucket" for r in results)
    # the data goes on a worker thread, after the answer: poll, with a bound
    deadline = time.monotonic() + 10
    while list(gw.repository("default").keys()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert list(gw.repository("default").keys()) == []


def test_an_overwrite_frees_the_displaced_data(gw: Gateway) -> None:
    first = asyncio.run(put_many(gw, "b", 1))[0]
    second = asyncio.run(put_many(gw, "b", 1))[0]  # the same key: the null version again
    repo = gw.repository("default")
    old, new = first[0].location.dataKey, second[0].location.dataKey
    deadline = time.monotonic() + 10
    while old in set(repo.keys()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(repo.keys()) == {new}
    stored = gw.store.get_version("b", "k0", None)
    assert stored is not None and stored["location"] == second[1]["location"]


def test_one_version_the_store_refuses_leaves_the_rest_of_its_group_stored(gw: Gateway) -> None:
    def refused(written: Written, bucket: Bucket | None) -> dict[str, Any]:
        return {**build_for("m3")(written, bucket), "key": ""}  # InvalidMetadata in the store

    async def group() -> list[Any]:
        repo = gw.repository("default")
        staged = [repo.stage_bytes(os.urandom(64)) for _ in range(6)]
        builds = [build_for(f"m{i}") if i != 3 else refused for i in range(6)]
        return await asyncio.gather(
            *(gw.put_batcher.put(s, checksums(), "b", f) for s, f in zip(staged, builds, strict=True) if s),
            return_exceptions=True,
        )

    before = gw.store.last_seq()
    results = asyncio.run(group())
    assert [isinstance(r, InvalidMetadata) for r in results] == [False, False, False, True, False, False]
    for i in (0, 1, 2, 4, 5):
        assert gw.store.get_version("b", f"m{i}", None) is not None
    # one journal entry per stored version, seqs dense: the refused one took none
    entries = gw.store.read_journal(before, 100)
    assert sorted(e.key for e in entries) == ["m0", "m1", "m2", "m4", "m5"]
    assert [e.seq for e in entries] == list(range(before + 1, before + 6))


def test_a_closed_batcher_refuses_and_writes_nothing(gw: Gateway) -> None:
    gw.put_batcher.close()
    results = asyncio.run(put_many(gw, "b", 1))
    assert isinstance(results[0], S3Error) and results[0].status == 503
    assert list(gw.repository("default").keys()) == []
